"""Models: the contract, the building blocks, the architectures.

- ``contract.py``: what any ``nn.Module`` must do to train (BaseModel, step functions). See
  docs/design.md.
- ``wrappers.py``: DDP and graph mode (torch.compile) around a model.
- ``layers/``: transformer building blocks (attention, MLP, embeddings, heads, init helpers).
- ``zoo/``: architectures built from them (the digits MLP, BERT, GPT-2), registered in MODELS.
"""

from .contract import (
    BaseModel,
    DataPreprocessor,
    make_train_step,
    mean_over_data_parallel,
    parse_losses,
    test_step,
    to_device,
    train_step,
    unwrap_model,
    val_step,
)
from .wrappers import compile_model, wrap_ddp
from .zoo.bert import BertForPreTraining, BertForSequenceClassification, BertModel
from .zoo.gpt import GPTForCausalLM, GPTModel
from .zoo.hf import from_hf_pretrained, load_hf_pretrained, save_hf_pretrained
from .zoo.mlp import DigitsMLP, MLPClassifier

__all__ = [
    "BaseModel",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertModel",
    "DataPreprocessor",
    "DigitsMLP",
    "GPTForCausalLM",
    "GPTModel",
    "MLPClassifier",
    "compile_model",
    "from_hf_pretrained",
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
