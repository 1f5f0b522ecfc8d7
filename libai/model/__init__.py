"""Models: the contract, the building blocks, the architectures.

- ``contract.py``: everything the engine reads from a model, listed (``CONTRACT``), and what
  ``num_items`` means under data parallel. See docs/models.md, "The model contract".
- ``steps.py``: the default steps for any ``nn.Module``, and the optional ``BaseModel``.
- ``wrappers.py``: DDP and graph mode (torch.compile) around a model.
- ``generation.py``: :func:`generate`, decoding for the causal LMs (padded batches, sampling).
- ``layers/``: transformer building blocks (attention, MLP, embeddings, heads, init helpers).
- ``zoo/``: architectures built from them (the digits MLP, BERT, RoBERTa, GPT-2, Llama) and their
  fine-tuning heads, each family registered once (``zoo/family.py``), with their Hugging Face
  adapters; everything ``zoo`` exports is exported here too.
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
from .zoo import *  # noqa: F403  the architectures and their families: zoo.__all__
from .zoo import __all__ as _ZOO

__all__ = [
    "CONTRACT",
    "BaseModel",
    "ContractField",
    "DataPreprocessor",
    "check_model",
    "compile_model",
    "generate",
    "make_train_step",
    "mean_over_data_parallel",
    "parse_losses",
    "test_step",
    "to_device",
    "train_step",
    "unwrap_model",
    "val_step",
    "wrap_ddp",
    *_ZOO,
]
