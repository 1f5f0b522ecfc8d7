"""Datasets, samplers, transforms and data loader building. See docs/data.md.

Importing this package registers its entries in ``DATASETS``, ``TRANSFORMS``, ``DATA_SAMPLERS``
and ``COLLATE_FUNCTIONS``.
"""

from .collate import default_collate, pseudo_collate
from .digits import DigitsDataset, load_digits_array
from .length_sampler import LengthGroupedSampler
from .loader import build_dataloader, dataloader_len, seed_worker, worker_seed
from .sampler import DefaultSampler
from .seeded import SampleKey, SeededDataset, sample_seed
from .text import BertPretrainingDataset, GPTDataset
from .transforms import Compose, RandomNoise, RandomShift, build_transform

__all__ = [
    "BertPretrainingDataset",
    "Compose",
    "DefaultSampler",
    "DigitsDataset",
    "GPTDataset",
    "LengthGroupedSampler",
    "RandomNoise",
    "RandomShift",
    "SampleKey",
    "SeededDataset",
    "build_dataloader",
    "build_transform",
    "dataloader_len",
    "default_collate",
    "load_digits_array",
    "pseudo_collate",
    "sample_seed",
    "seed_worker",
    "worker_seed",
]
