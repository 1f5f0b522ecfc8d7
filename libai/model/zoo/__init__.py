"""Architectures, each one file, registered in ``MODELS``; ``hf.py`` and ``hf_mapping.py`` convert
Hugging Face weights (``hf_tokenizer.py`` writes the tokenizer beside them). Each family's
arguments are one config object (``BertConfig``, ``GPTConfig``; ``config.py``). BERT's
fine-tuning heads are in ``bert_heads.py``; the losses they and GPT's classifier share, with
Hugging Face's ``problem_type``, in ``classification.py``."""

from .bert import BertConfig, BertForPreTraining, BertModel, BertPreTrainingConfig
from .bert_heads import (
    BertClassifierConfig,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from .classification import PROBLEM_TYPES
from .config import ModelConfig
from .gpt import (
    GPTClassifierConfig,
    GPTConfig,
    GPTForCausalLM,
    GPTForSequenceClassification,
    GPTModel,
)
from .llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from .mlp import DigitsMLP, MLPClassifier
from .roberta import RobertaConfig, RobertaForMaskedLM, RobertaModel

__all__ = [
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
    "PROBLEM_TYPES",
    "RobertaConfig",
    "RobertaForMaskedLM",
    "RobertaModel",
]
