"""Text data: tokenizers, the indexed token format, corpora, and the BERT and GPT datasets."""

from .corpus import SPLITS, TextCorpus
from .indexed import IndexedTokenDataset, IndexedTokenWriter, index_paths, token_dtype
from .tokenizer import TOKENIZER_KINDS, TextTokenizer, build_tokenizer

__all__ = [
    "IndexedTokenDataset",
    "IndexedTokenWriter",
    "SPLITS",
    "TOKENIZER_KINDS",
    "TextCorpus",
    "TextTokenizer",
    "build_tokenizer",
    "index_paths",
    "token_dtype",
]
