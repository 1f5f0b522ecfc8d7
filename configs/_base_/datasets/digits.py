# The handwritten digits that scikit-learn ships inside its wheel: 1797 8x8 images, no download.
# Three disjoint splits of one fixed permutation: val 20% (359 images), a held-out test 15%
# (270), train the remaining 65% (1168). Every split must be given the same ratios.
_ratios = dict(val_ratio=0.2, test_ratio=0.15)
train_dataloader = dict(
    dataset=dict(type="DigitsDataset", split="train", **_ratios,
                 transform=[dict(type="RandomShift", max_shift=1)]),
    sampler=dict(type="DefaultSampler", shuffle=True),
    batch_size=32,
    num_workers=0,
)
val_dataloader = dict(
    dataset=dict(type="DigitsDataset", split="val", **_ratios),
    sampler=dict(type="DefaultSampler", shuffle=False),
    batch_size=128,
    num_workers=0,
)
test_dataloader = dict(val_dataloader, dataset=dict(type="DigitsDataset", split="test", **_ratios))
val_evaluator = dict(type="Accuracy")
test_evaluator = val_evaluator
