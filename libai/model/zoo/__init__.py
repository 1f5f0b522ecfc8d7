"""Architectures, each one file, registered in ``MODELS``; ``hf.py`` and ``hf_mapping.py`` convert
Hugging Face weights. Each family's arguments are one config object (``BertConfig``,
``GPTConfig``; ``config.py``)."""

from .bert import (
    BertClassifierConfig,
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
    BertPreTrainingConfig,
)
from .config import ModelConfig
from .gpt import GPTConfig, GPTForCausalLM, GPTModel
from .mlp import DigitsMLP, MLPClassifier

__all__ = [
    "BertClassifierConfig",
    "BertConfig",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertModel",
    "BertPreTrainingConfig",
    "DigitsMLP",
    "GPTConfig",
    "GPTForCausalLM",
    "GPTModel",
    "MLPClassifier",
    "ModelConfig",
]
