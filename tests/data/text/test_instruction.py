"""InstructionDataset and instruction_collate: response-only labels, the two batching modes,
truncation, templates, errors, the built-in Shakespeare set, and a run through tools/train.py
and tools/generate.py --instruction."""

import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from text_fixtures import shakespeare_documents, train_tokenizer

from libai.checkpoint import load_checkpoint, load_model_state, save_checkpoint
from libai.data.text import (
    InstructionDataset,
    TextCorpus,
    encode_prompt,
    instruction_collate,
    shakespeare_files,
    shakespeare_instructions,
)
from libai.data.text.instruction_sets import _scene_split
from libai.registry import COLLATE_FUNCTIONS, DATASETS, MODELS
from libai.runner import Runner
from libai.utils.errors import ConfigError, DataError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CONFIG = os.path.join(ROOT, "configs", "gpt2_tiny_instruct.py")
IGNORE = -100
RECORDS = [
    {"prompt": "Who is the prince of Denmark?", "response": "Hamlet, son of the late king."},
    {"prompt": "Name a fairy queen.", "response": "Titania"},
    {"prompt": "What does Juliet ask from the balcony?",
     "response": "Wherefore art thou Romeo? Deny thy father and refuse thy name."},
    {"prompt": "Say something.", "response": "Something."},
]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    """A small byte-level BPE (300 tokens) saved as tokenizer.json."""
    tok = train_tokenizer(shakespeare_documents(2, 300), "bpe", 300)
    return str(tok.save(tmp_path_factory.mktemp("tok")))


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def build(tmp_path, tokenizer_path, records=RECORDS, **kwargs):
    return InstructionDataset(write_jsonl(tmp_path / "data.jsonl", records), tokenizer_path,
                              **kwargs)


def test_labels_are_the_next_token_on_responses_only(tmp_path, tokenizer_path):
    ds = build(tmp_path, tokenizer_path, max_seq_length=128)
    tok = ds.tokenizer
    assert DATASETS.get("InstructionDataset") is InstructionDataset
    assert COLLATE_FUNCTIONS.get("instruction_collate") is instruction_collate
    assert ds.metainfo["vocab_size"] == 300 and ds.metainfo["max_seq_length"] == 128
    batch = instruction_collate([ds[i] for i in range(len(ds))])
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert ids.shape == labels.shape == mask.shape == (4, int(ds.lengths.max()))
    for i, record in enumerate(RECORDS):
        n = int(ds.lengths[i])
        prompt = encode_prompt(tok, "alpaca", record["prompt"])
        response = tok.encode(record["response"]) + [tok.eod_id]
        assert ids[i, :n].tolist() == (prompt + response)[:-1]  # the last token is only a label
        assert mask[i].tolist() == [1] * n + [0] * (ids.shape[1] - n)
        # -100 exactly on the template, the prompt and the padding
        trained = (labels[i] != IGNORE).nonzero().flatten().tolist()
        assert trained == list(range(len(prompt) - 1, n))
        for t in trained[:-1]:
            assert labels[i, t] == ids[i, t + 1]
        assert tok.decode(labels[i, trained].tolist(), skip_special_tokens=False) == \
            record["response"] + "<|endoftext|>"


def test_packing_gives_the_pairs_of_padding_in_full_rows(tmp_path, tokenizer_path):
    padded = build(tmp_path, tokenizer_path, max_seq_length=128)
    length = int(padded.lengths.max()) + 1  # no example is truncated; rows cut examples
    packed = build(tmp_path, tokenizer_path, max_seq_length=length, packing=True, seed=3)
    assert len(packed) == -(-int(padded.lengths.sum() + 4) // length) > 1
    batch = instruction_collate([packed[i] for i in range(len(packed))])
    assert batch["input_ids"].shape == (len(packed), length)
    mask = batch["attention_mask"].flatten()
    assert mask[: int(mask.sum())].all() and (batch["labels"].flatten()[mask == 0] == IGNORE).all()
    stream_ids = batch["input_ids"].flatten()[mask == 1].tolist()
    stream_labels = batch["labels"].flatten()[mask == 1].tolist()
    start = 0
    for k in np.random.default_rng(3).permutation(4):  # the packing order
        item, n = padded[int(k)], int(padded.lengths[k])
        assert stream_ids[start: start + n] == item["input_ids"].tolist()
        assert stream_labels[start: start + n] == item["labels"].tolist()
        # the example's end-of-text id: an input whose label would be the next example's start
        assert stream_ids[start + n] == padded.tokenizer.eod_id
        assert stream_labels[start + n] == IGNORE
        start += n + 1
    assert start == len(stream_ids)


def test_truncation_keeps_the_prompt_and_drops_what_cannot_answer(tmp_path, tokenizer_path,
                                                                   libai_log):
    long = {"prompt": "Tell the tale.", "response": " ".join(["once upon a time"] * 20)}
    no_room = {"prompt": " ".join(["why"] * 40), "response": "Because."}
    prompt = encode_prompt(build(tmp_path, tokenizer_path).tokenizer, "alpaca", long["prompt"])
    length = len(prompt) + 12  # room for 12 response tokens
    ds = build(tmp_path, tokenizer_path, records=[long, no_room, RECORDS[1]],
               max_seq_length=length)
    assert len(ds) == 2 and ds.num_dropped == 1
    assert any(f"1 dropped: the prompt fills max_seq_length={length}" in m for m in libai_log)
    item = ds[0]
    assert len(item["input_ids"]) == length
    assert item["input_ids"][: len(prompt)].tolist() == prompt
    kept = ds.tokenizer.decode(item["labels"][item["labels"] != IGNORE].tolist())
    assert len(kept) > 10 and long["response"].startswith(kept)
    with pytest.raises(DataError, match="none of its 1 examples has a response token within "
                                        f"max_seq_length={length}"):
        build(tmp_path, tokenizer_path, records=[no_room], max_seq_length=length)


def test_chat_template_trains_every_assistant_turn(tmp_path, tokenizer_path):
    chat = {"messages": [
        {"role": "system", "content": "Speak in verse."},
        {"role": "user", "content": "Greet me."},
        {"role": "assistant", "content": "Good morrow."},
        {"role": "user", "content": "And now farewell."},
        {"role": "assistant", "content": "Adieu."},
    ]}
    ds = build(tmp_path, tokenizer_path, records=[chat, RECORDS[1]], template="chat")
    tok = ds.tokenizer
    item = ds[0]
    text = tok.decode(item["input_ids"].tolist(), skip_special_tokens=False)
    assert text == ("<|system|>\nSpeak in verse.\n<|user|>\nGreet me.\n<|assistant|>\nGood "
                    "morrow.<|endoftext|><|user|>\nAnd now farewell.\n<|assistant|>\nAdieu.")
    trained = item["labels"][item["labels"] != IGNORE].tolist()
    assert tok.decode(trained, skip_special_tokens=False) == \
        "Good morrow.<|endoftext|>Adieu.<|endoftext|>"
    # a prompt/response record reads as one user turn and one assistant turn
    assert tok.decode(ds[1]["input_ids"].tolist()) == "<|user|>\nName a fairy queen.\n<|assistant|>\n" \
        "Titania"
    custom = dict(user="Q: {content}\n", assistant="A: {content}")
    ds = build(tmp_path, tokenizer_path, records=RECORDS[1:2], template=custom)
    assert tok.decode(ds[0]["input_ids"].tolist()) == "Q: Name a fairy queen.\nA: Titania"


@pytest.mark.parametrize("records, kwargs, error, message", [
    ([{"prompt": "a", "responce": "b"}], {}, DataError,
     "data.jsonl line 1 has no 'response' key. Did you mean 'responce'? Its keys: prompt, "
     "responce; name yours with response_key=..."),
    ([{"messages": [{"role": "user", "content": "hi"}]}], {}, DataError,
     "data.jsonl line 1: 'messages' has no 'assistant' turn"),
    ([{"messages": [{"role": "robot", "content": "hi"}]}], {}, DataError,
     "turn 0 of 'messages' must be {'role': 'system' | 'user' | 'assistant'"),
    ([], {}, DataError, "data.jsonl holds no records: it is empty"),
    (RECORDS, {"template": "alpacca"}, ConfigError,
     "template='alpacca' is unknown. Did you mean 'alpaca'?"),
    (RECORDS, {"template": {"user": "{content}", "assistent": "{content}"}}, ConfigError,
     "unknown role 'assistent'. Did you mean 'assistant'?"),
    (RECORDS, {"max_seq_length": 0}, ConfigError, "max_seq_length=0: give an int >= 1"),
])
def test_mistakes_are_one_line(tmp_path, tokenizer_path, records, kwargs, error, message):
    with pytest.raises(error) as e:
        build(tmp_path, tokenizer_path, records=records, **kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_tokenizer_that_does_not_fit_the_model_stops_the_build(tmp_path, tokenizer_path,
                                                                 shipped_config):
    cfg = shipped_config("gpt2_tiny_instruct")
    cfg.merge_from_options({"load_from": None, "work_dir": str(tmp_path)})
    data = write_jsonl(tmp_path / "d.jsonl", RECORDS)
    for loader in ("train_dataloader", "val_dataloader", "test_dataloader"):
        cfg[loader]["dataset"].update(data_files=data, tokenizer=tokenizer_path)
    with pytest.raises(ConfigError, match=r"model.vocab_size=8192 but the tokenizer of "
                                          r"train_dataloader.dataset \(.*tokenizer.json\) has 300"):
        Runner.from_cfg(cfg, fast_dev_run=1).train()


def test_builtin_set_is_split_by_scene_as_the_pretraining_corpus(tmp_path):
    val, test = shakespeare_instructions("val"), shakespeare_instructions("test")
    assert len(val) > 1000 and len(test) > 1000
    assert {r["task"] for r in val} == {"next_speaker", "last_speaker"}
    scene = lambda r: r["_where"].rsplit(" speech", 1)[0]  # noqa: E731
    assert not {scene(r) for r in val} & {scene(r) for r in test}
    plays = {path.stem: path.read_text(encoding="utf-8") for path in shakespeare_files()}
    alternate = []
    for r in val:  # two speeches under their speakers' names; a name answers
        question, passage = r["prompt"].split("\n\n", 1)
        first = passage.split(":\n")[0]
        assert f"**{first}**" in plays[r["play"]] and f"**{r['response']}**" in plays[r["play"]]
        assert 3 <= passage.count("\n") <= 5
        if r["task"] == "last_speaker":
            assert question == "Who speaks last in this passage?"
            assert f"\n{r['response']}:\n" in passage
        else:
            assert question == "Who speaks next?"
            alternate.append(r["response"] == first)
    # the next speaker is the one of two speeches back about two times in three
    assert 0.5 < np.mean(alternate) < 0.8
    # the scenes are dealt as TextCorpus.split_documents deals the corpus's 781 documents
    corpus = SimpleNamespace(tokens=SimpleNamespace(num_docs=781), name="shakespeare")
    for split in ("train", "val", "test"):
        assert np.array_equal(_scene_split(781, split), TextCorpus.split_documents(corpus, split))
    with pytest.raises(ConfigError, match="split='valid' of shakespeare_instruct is unknown. "
                                          "Did you mean 'val'"):
        InstructionDataset("shakespeare_instruct", "unused", split="valid")


def test_train_counts_only_responses_and_generate_answers(tmp_path, tokenizer_path, run_tool,
                                                         shipped_config):
    train = write_jsonl(tmp_path / "train.jsonl", RECORDS * 4)
    val = write_jsonl(tmp_path / "val.jsonl", RECORDS)
    small = {"model.vocab_size": 300, "model.hidden_size": 32, "model.num_layers": 1,
             "model.num_heads": 2}
    torch.manual_seed(0)
    cfg = shipped_config("gpt2_tiny_instruct")
    cfg.merge_from_options(small)
    save_checkpoint({"state_dict": MODELS.build(cfg.model.to_dict()).state_dict()},
                    tmp_path / "start.pth")
    options = [f"{k}={v}" for k, v in small.items()] + [
        f"load_from={tmp_path / 'start.pth'}", "train_cfg.max_iters=3", "train_cfg.val_interval=3",
        "default_hooks.checkpoint.interval=3", "default_hooks.throughput=None",
        "+default_hooks.logger.plot=False", "train_dataloader.batch_size=4"]
    for loader, data in (("train", train), ("val", val), ("test", val)):
        options += [f"{loader}_dataloader.dataset.data_files={data}",
                    f"{loader}_dataloader.dataset.tokenizer={tokenizer_path}"]
    out = run_tool("tools/train.py", CONFIG, "--work-dir", tmp_path / "run", "--cfg-options",
                   *options)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "Loaded" in out.stdout + out.stderr or "load" in (out.stdout + out.stderr).lower()
    scalars = [json.loads(line) for line in
               next((tmp_path / "run").glob("*/scalars.jsonl")).read_text().splitlines()]
    logged = next(s["val/perplexity"] for s in scalars if "val/perplexity" in s)

    # the logged perplexity is the saved model's, over the response tokens alone
    cfg.merge_from_options({f"val_dataloader.dataset.{k}": v for k, v in
                            (("data_files", val), ("tokenizer", tokenizer_path))})
    model = MODELS.build(cfg.model.to_dict()).eval()
    load_model_state(model, load_checkpoint(str(tmp_path / "run" / "iter_3.pth"))["state_dict"])
    ds = DATASETS.build(cfg.val_dataloader.dataset.to_dict())
    batch = instruction_collate([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        logits = model.logits(batch["input_ids"])  # (B, S, V)
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(),
                                            reduction="sum")
    responses = sum(len(ds.tokenizer.encode(r["response"])) + 1 for r in RECORDS)
    assert int((batch["labels"] != IGNORE).sum()) == responses
    assert logged == pytest.approx(math.exp(nll.item() / responses), rel=1e-4)
    ids, pad = batch["input_ids"], batch["attention_mask"] == 0
    every = ids[:, 1:].masked_fill(pad[:, 1:], IGNORE)  # every next token, as pretraining counts
    every = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), every.flatten())
    assert not math.isclose(logged, math.exp(every.item()), rel_tol=1e-3)

    gen = run_tool("tools/generate.py", CONFIG, tmp_path / "run" / "iter_3.pth", "--instruction",
                   "Name a fairy queen.", "--greedy", "--max-new-tokens", "5", "--cfg-options",
                   *[o for o in options if o.startswith(("model.", "test_dataloader.dataset"))])
    assert gen.returncode == 0, gen.stderr[-3000:]
    prompt = encode_prompt(ds.tokenizer, "alpaca", "Name a fairy queen.")
    full = model.generate(torch.tensor([prompt]), 5, eos_token_id=ds.tokenizer.eod_id)[0].tolist()
    answer = full[len(prompt):]
    answer = answer[: answer.index(ds.tokenizer.eod_id)] if ds.tokenizer.eod_id in answer else answer
    assert gen.stdout == ds.tokenizer.decode(answer) + "\n"
    assert "### Instruction" not in gen.stdout
