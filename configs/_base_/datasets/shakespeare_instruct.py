# Instruction tuning on the built-in Shakespeare questions (no download; see
# libai/data/text/instruction_sets.py): "Who speaks next?" after two speeches, and "Who speaks
# last in this passage?", each answered with a speaker's name; 27,891 train / 1,350 val /
# 1,332 test examples, split by scene as the pretraining corpus splits them. Prompts are framed
# with the Alpaca-style template; the loss counts the response tokens only.
_tokenizer = dict(corpus="shakespeare", type="bpe", vocab_size=8192)  # what gpt2_tiny reads
_dataset = dict(
    type="InstructionDataset",
    data_files="shakespeare_instruct",
    tokenizer=_tokenizer,
    template="alpaca",
    max_seq_length=128,
    packing=False,  # one example per row, batches padded to their longest
)
train_dataloader = dict(
    dataset=dict(_dataset, split="train"),
    # rows of similar length batched together: padding mode pads little
    sampler=dict(type="LengthGroupedSampler", shuffle=True),
    collate_fn="instruction_collate",
    batch_size=32,
    num_workers=0,
)
val_dataloader = dict(
    dataset=dict(_dataset, split="val"),
    sampler=dict(type="DefaultSampler", shuffle=False),
    collate_fn="instruction_collate",
    batch_size=64,
    num_workers=0,
)
test_dataloader = dict(val_dataloader, dataset=dict(_dataset, split="test"))
# perplexity and next-token accuracy of the responses (the labels are -100 elsewhere), and the
# share of responses greedy decoding writes exactly (exact_match)
val_evaluator = [dict(type="Perplexity"), dict(type="TokenAccuracy", exact_match=True)]
test_evaluator = val_evaluator
