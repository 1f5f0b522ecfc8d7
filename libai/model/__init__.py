"""Models: the contract, the building blocks, the architectures.

- ``contract.py``: everything the engine reads from a model, listed (``CONTRACT``), and what
  ``num_items`` means under data parallel. See docs/models.md, "The model contract".
- ``steps.py``: the default steps for any ``nn.Module``, and the optional ``BaseModel``.
- ``wrappers.py``: DDP and graph mode (torch.compile) around a model.
- ``generation.py``: :func:`generate`, decoding for the causal LMs (padded batches, sampling).
- ``layers/``: transformer building blocks (attention, MLP, embeddings, heads, init helpers).
- ``zoo/``: architectures built from them (the digits MLP, BERT, RoBERTa, GPT-2, Llama) and their
  fine-tuning heads, registered in MODELS.
"""

from .contract import CONTRACT, ContractField, check_model, mean_over_data_parallel
from .generation import generate
from .steps import (
    BaseModel,
    DataPreprocessor,
    make_train_step,
    parse_losses,
    test_step,
    to_device,
    train_step,
    unwrap_model,
    val_step,
)
from .wrappers import compile_model, wrap_ddp
from .zoo.bert import BertConfig, BertForPreTraining, BertModel, BertPreTrainingConfig
from .zoo.bert_heads import (
    BertClassifierConfig,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from .zoo.gpt import (
    GPTClassifierConfig,
    GPTConfig,
    GPTForCausalLM,
    GPTForSequenceClassification,
    GPTModel,
)
from .zoo.hf import from_hf_pretrained, load_hf_pretrained, save_hf_pretrained
from .zoo.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from .zoo.mlp import DigitsMLP, MLPClassifier
from .zoo.roberta import RobertaConfig, RobertaForMaskedLM, RobertaModel

__all__ = [
    "CONTRACT",
    "BaseModel",
    "BertClassifierConfig",
    "BertConfig",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertPreTrainingConfig",
    "ContractField",
    "DataPreprocessor",
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
    "RobertaConfig",
    "RobertaForMaskedLM",
    "RobertaModel",
    "check_model",
    "compile_model",
    "from_hf_pretrained",
    "generate",
    "load_hf_pretrained",
    "make_train_step",
    "mean_over_data_parallel",
    "parse_losses",
    "save_hf_pretrained",
    "test_step",
    "to_device",
    "train_step",
    "unwrap_model",
    "val_step",
    "wrap_ddp",
]
