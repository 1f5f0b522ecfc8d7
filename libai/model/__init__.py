"""The model contract: any nn.Module; BaseModel and step functions. See docs/design.md."""

from .base import (
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
from .classifiers import DigitsMLP, MLPClassifier
from .wrappers import compile_model, wrap_ddp

__all__ = [
    "BaseModel",
    "DataPreprocessor",
    "DigitsMLP",
    "MLPClassifier",
    "compile_model",
    "make_train_step",
    "parse_losses",
    "test_step",
    "to_device",
    "train_step",
    "unwrap_model",
    "val_step",
    "wrap_ddp",
]
