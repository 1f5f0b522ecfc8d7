"""Text data: tokenizers, the indexed token format, corpora, and the BERT and GPT datasets."""

from .bert_dataset import NEXT_SENTENCE_TASKS, BertPretrainingDataset
from .corpus import SPLITS, TextCorpus
from .gpt_dataset import GPTDataset
from .indexed import IndexedTokenDataset, IndexedTokenWriter, index_paths, token_dtype
from .instruction import (
    TEMPLATES,
    InstructionDataset,
    encode_prompt,
    instruction_collate,
    resolve_template,
)
from .instruction_sets import BUILTIN_INSTRUCTION_SETS, shakespeare_instructions
from .labeled import TASKS, LabeledTextDataset, pad_collate
from .preprocess import preprocess_corpus, preprocess_documents
from .reading import INPUT_FORMATS, read_documents
from .records import BUILTIN_LABELED, genre_records, read_records
from .shakespeare import shakespeare_documents, shakespeare_files
from .sources import BUILTIN_CORPORA, default_cache_dir, load_corpus
from .tokenizer import TOKENIZER_KINDS, TextTokenizer, build_tokenizer
from .tokenizer_spec import resolve_tokenizer

__all__ = [
    "BUILTIN_INSTRUCTION_SETS",
    "InstructionDataset",
    "TEMPLATES",
    "encode_prompt",
    "instruction_collate",
    "resolve_template",
    "shakespeare_instructions",
    "BUILTIN_LABELED",
    "LabeledTextDataset",
    "TASKS",
    "genre_records",
    "pad_collate",
    "read_records",
    "resolve_tokenizer",
    "BUILTIN_CORPORA",
    "INPUT_FORMATS",
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
    "default_cache_dir",
    "index_paths",
    "load_corpus",
    "preprocess_corpus",
    "preprocess_documents",
    "read_documents",
    "shakespeare_documents",
    "shakespeare_files",
    "token_dtype",
]
