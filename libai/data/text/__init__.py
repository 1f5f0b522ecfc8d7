"""Text data: tokenizers, the indexed token format, corpora, and the BERT and GPT datasets."""

from .bert_dataset import NEXT_SENTENCE_TASKS, BertPretrainingDataset
from .corpus import SPLITS, TextCorpus
from .gpt_dataset import GPTDataset
from .indexed import IndexedTokenDataset, IndexedTokenWriter, index_paths, token_dtype
from .tokenizer import TOKENIZER_KINDS, TextTokenizer, build_tokenizer

__all__ = [
    "BertPretrainingDataset",
    "GPTDataset",
    "IndexedTokenDataset",
    "IndexedTokenWriter",
    "NEXT_SENTENCE_TASKS",
    "SPLITS",
    "TOKENIZER_KINDS",
    "TextCorpus",
    "TextTokenizer",
    "build_tokenizer",
    "index_paths",
    "token_dtype",
]
