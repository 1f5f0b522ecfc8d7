# The handwritten digits that scikit-learn ships inside its wheel: 1797 8x8 images, no download.
train_dataloader = dict(
    dataset=dict(type="DigitsDataset", split="train",
                 transform=[dict(type="RandomShift", max_shift=1)]),
    sampler=dict(type="DefaultSampler", shuffle=True),
    batch_size=32,
    num_workers=0,
)
val_dataloader = dict(
    dataset=dict(type="DigitsDataset", split="val"),
    sampler=dict(type="DefaultSampler", shuffle=False),
    batch_size=128,
    num_workers=0,
)
test_dataloader = val_dataloader
val_evaluator = dict(type="Accuracy")
test_evaluator = val_evaluator
