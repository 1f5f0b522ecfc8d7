"""Architectures, each one file, each family registered once (``family.py``: a
:class:`ModelFamily` record in the model file, whose classes ``@FAMILY.register`` puts in
``MODELS``). Each family's arguments are one config object (``BertConfig``, ``GPTConfig``;
``config.py``); the causal LMs share ``causal_lm.CausalLM``. Hugging Face folders go in and out
through ``hf.py``, which reaches each family's adapter (``hf_bert.py``, ``hf_gpt2.py``,
``hf_llama.py``, ``hf_roberta.py``, on ``hf_base.py``) through its record. BERT's fine-tuning
heads are in ``bert_heads.py``; the losses they and GPT's classifier share, with Hugging Face's
``problem_type``, in ``classification.py``."""

from .bert import BERT, BertConfig, BertForPreTraining, BertModel, BertPreTrainingConfig
from .bert_heads import (
    BertClassifierConfig,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from .classification import PROBLEM_TYPES
from .config import ModelConfig
from .family import ModelFamily, families, get_family
from .gpt import (
    GPT2,
    GPTClassifierConfig,
    GPTConfig,
    GPTForCausalLM,
    GPTForSequenceClassification,
    GPTModel,
)
from .hf import from_hf_pretrained, load_hf_pretrained, save_hf_pretrained
from .llama import LLAMA, LlamaConfig, LlamaForCausalLM, LlamaModel
from .mlp import DigitsMLP, MLPClassifier
from .roberta import ROBERTA, RobertaConfig, RobertaForMaskedLM, RobertaModel

__all__ = [
    "BERT",
    "GPT2",
    "LLAMA",
    "PROBLEM_TYPES",
    "ROBERTA",
    "BertClassifierConfig",
    "BertConfig",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertPreTrainingConfig",
    "DigitsMLP",
    "GPTClassifierConfig",
    "GPTConfig",
    "GPTForCausalLM",
    "GPTForSequenceClassification",
    "GPTModel",
    "LlamaConfig",
    "LlamaForCausalLM",
    "LlamaModel",
    "MLPClassifier",
    "ModelConfig",
    "ModelFamily",
    "RobertaConfig",
    "RobertaForMaskedLM",
    "RobertaModel",
    "families",
    "from_hf_pretrained",
    "get_family",
    "load_hf_pretrained",
    "save_hf_pretrained",
]
