"""Architectures, each one file, registered in ``MODELS``; ``hf.py`` and ``hf_mapping.py`` convert
Hugging Face weights."""

from .bert import BertForPreTraining, BertForSequenceClassification, BertModel
from .gpt import GPTForCausalLM, GPTModel
from .mlp import DigitsMLP, MLPClassifier

__all__ = [
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertModel",
    "DigitsMLP",
    "GPTForCausalLM",
    "GPTModel",
    "MLPClassifier",
]
