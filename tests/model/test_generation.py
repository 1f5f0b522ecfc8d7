"""libai.model.generation: padded batches decode as transformers' generate does and as each
prompt does alone; padded training batches; the options are checked before any work."""

import math

import pytest
import torch
import torch.nn.functional as F

from libai.model import GPTForCausalLM, from_hf_pretrained, generate
from libai.model.generation import check_generation_options
from libai.model.layers import causal_padding_mask, padding_position_ids
from libai.utils.errors import ConfigError, DataError

transformers = pytest.importorskip("transformers")

GPT2 = dict(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
PAD = 99  # any id: the mask keeps it out of attention
TOL = dict(atol=1e-5, rtol=0)


def randomized(model, seed=0):
    """Weights larger than GPT-2's init, biases and norms random too: the greedy choices vary
    (GPT-2's init mostly repeats the last token) and are clear-cut (the top two logits differ
    by 1e-3 at least here, far above float rounding)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model.eval()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(transformers' tiny GPT-2, the same weights in libai)."""
    hf = randomized(transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2)))
    folder = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(folder)
    return hf, from_hf_pretrained(str(folder)).eval()


def prompts(lengths=(3, 7, 5), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, PAD, (n,), generator=g).tolist() for n in lengths]


def left_pad(rows):
    """(ids (B, L), mask (B, L)) with the padding on the left."""
    L = max(map(len, rows))
    ids = torch.tensor([[PAD] * (L - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (L - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def test_padded_greedy_batch_equals_transformers_and_each_prompt_alone(gpt2):
    hf, ours = gpt2
    rows = prompts()
    ids, mask = left_pad(rows)
    reference = hf.generate(ids, attention_mask=mask, do_sample=False, pad_token_id=PAD,
                            max_new_tokens=8)
    out = ours.generate(ids, 8, attention_mask=mask)
    assert out.shape == (3, 7 + 8) and torch.equal(out, reference)
    assert len({tuple(r[-8:]) for r in out.tolist()}) == 3  # the rows differ: a real check
    for row, prompt in zip(out, rows):
        alone = ours.generate(torch.tensor([prompt]), 8)[0]
        assert torch.equal(row[-len(prompt) - 8:], alone)
    again = generate(ours, ids, 8, attention_mask=mask.bool())  # the function, a bool mask
    assert torch.equal(again, out)


@pytest.mark.parametrize("side", ["left", "right"])
def test_logits_with_a_mask_equal_transformers_at_the_tokens(gpt2, side):
    hf, ours = gpt2
    ids, mask = left_pad(prompts())
    if side == "right":  # move each row's padding to the end
        ids = torch.stack([torch.cat([r[m.bool()], r[~m.bool()]]) for r, m in zip(ids, mask)])
        mask = mask.flip(-1)
    positions = padding_position_ids(mask)
    with torch.no_grad():
        theirs = hf(ids, attention_mask=mask, position_ids=positions).logits
        mine = ours.logits(ids, attention_mask=mask)  # positions derived from the mask
    real = mask.bool()
    assert torch.isfinite(mine).all()  # padding queries see themselves: no NaN anywhere
    torch.testing.assert_close(mine[real], theirs[real], **TOL)


def test_cache_steps_with_a_mask_equal_one_full_pass(gpt2):
    _, ours = gpt2
    ids, mask = left_pad(prompts())
    with torch.no_grad():
        full = ours.logits(ids, attention_mask=mask)  # (B, L, V)
        caches = ours.new_kv_caches(3)
        first = ours.logits(ids[:, :4], caches, attention_mask=mask[:, :4])
        rest = [ours.logits(ids[:, t:t + 1], caches, attention_mask=mask[:, :t + 1])
                for t in range(4, ids.shape[1])]
    stepped = torch.cat([first, *rest], dim=1)
    torch.testing.assert_close(stepped[mask.bool()], full[mask.bool()], **TOL)


def test_right_padded_training_batch_loss_is_the_unpadded_loss(gpt2):
    _, model = gpt2
    rows = prompts((9, 4, 6), seed=2)
    L = max(map(len, rows))
    ids = torch.tensor([r + [PAD] * (L - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (L - len(r)) for r in rows])
    labels = torch.tensor([r[1:] + [-100] * (L - len(r) + 1) for r in rows])
    batch = dict(input_ids=ids, attention_mask=mask, labels=labels)
    model.train()
    try:
        padded = model(batch)
        sums = [model(dict(input_ids=torch.tensor([r]), labels=torch.tensor([r[1:] + [-100]])))
                ["loss"] * (len(r) - 1) for r in rows]
    finally:
        model.eval()
    assert padded["num_items"]["loss"] == sum(len(r) - 1 for r in rows)
    torch.testing.assert_close(padded["loss"], sum(sums) / sum(len(r) - 1 for r in rows), **TOL)
    with torch.no_grad():  # eval: each row's nll sum is its unpadded one
        stats = model(batch)
    torch.testing.assert_close(stats["nll_sum"], torch.stack(sums).detach(), **TOL)


def test_causal_padding_mask_and_positions():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0]])
    m = causal_padding_mask(mask, 4)
    assert m.shape == (2, 1, 4, 4) and m.dtype == torch.bool
    assert m[0, 0].tolist() == [[True, False, False, False], [False, True, False, False],
                                [False, False, True, False], [False, False, True, True]]
    assert m[1, 0].tolist() == [[True, False, False, False], [True, True, False, False],
                                [True, True, True, False], [True, True, True, True]]
    step = causal_padding_mask(torch.tensor([[0, 1, 1]]), 1)  # one new query after a cache
    assert step.tolist() == [[[[False, True, True]]]]
    assert padding_position_ids(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 2]]
    assert padding_position_ids(mask, 1).tolist() == [[1], [2]]


def tiny_model(**kw):
    dims = dict(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                max_position_embeddings=64)
    return randomized(GPTForCausalLM(**(dims | kw)))


class Untouchable:
    """A model that fails the test if generate does any work with it."""

    max_position_embeddings = 64

    def logits(self, *args, **kwargs):
        raise AssertionError("generate ran the model before checking its options")

    new_kv_caches = logits


@pytest.mark.parametrize("options, name", [
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature="1"), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_k=-3), "top_k"),
    (dict(top_k=2.5), "top_k"),
    (dict(top_k=True), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=-0.1), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_p=float("nan")), "top_p"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(eos_token_id=-1), "eos_token_id"),
    (dict(eos_token_id=[]), "eos_token_id"),
    (dict(eos_token_id="</s>"), "eos_token_id"),
])
def test_a_bad_option_is_one_line_before_any_work(options, name):
    kwargs = dict(max_new_tokens=4) | options
    with pytest.raises(ConfigError) as exc:
        generate(Untouchable(), torch.zeros(1, 3, dtype=torch.long), do_sample=True, **kwargs)
    message = str(exc.value)
    assert message.startswith(name) and "\n" not in message and "got" in message
    with pytest.raises(ConfigError):  # greedy too: a wrong value is wrong whatever the mode
        generate(Untouchable(), torch.zeros(1, 3, dtype=torch.long), **kwargs)


def test_bad_inputs_are_data_errors():
    model = tiny_model()
    ids = torch.ones(2, 3, dtype=torch.long)
    cases = [
        (dict(input_ids=ids.float()), "input_ids must be a (batch, length) long tensor"),
        (dict(input_ids=ids[0]), "input_ids must be a (batch, length) long tensor"),
        (dict(attention_mask=torch.ones(2, 4)), "attention_mask has shape (2, 4) but"),
        (dict(attention_mask=torch.tensor([[1, 1, 1], [0, 0, 0]])), "row 1 is all padding"),
    ]
    for kw, text in cases:
        with pytest.raises(DataError, match=text.replace("(", r"\(").replace(")", r"\)")):
            generate(model, **(dict(input_ids=ids, max_new_tokens=2) | kw))


def test_temperature_zero_is_greedy_and_zero_new_tokens_is_the_input():
    model = tiny_model()
    ids, mask = left_pad(prompts())
    greedy = generate(model, ids, 6, attention_mask=mask)
    zero = generate(model, ids, 6, attention_mask=mask, do_sample=True, temperature=0,
                    generator=torch.Generator().manual_seed(0))
    assert torch.equal(zero, greedy)
    assert torch.equal(generate(model, ids, 0, attention_mask=mask), ids)
    check_generation_options(0, 0, 1, 1.0, [0, 5])  # the edges are allowed


def test_padded_sampling_is_reproducible_with_a_seeded_generator():
    model = tiny_model()
    ids, mask = left_pad(prompts())

    def sample(seed):
        return generate(model, ids, 10, attention_mask=mask, do_sample=True, temperature=1.5,
                        top_k=20, top_p=0.95, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(sample(7), sample(7))
    assert not torch.equal(sample(7), sample(8))


def test_eos_stops_a_row_and_pads_it_with_eos():
    model = tiny_model()
    ids, mask = left_pad(prompts())
    L = ids.shape[1]
    greedy = generate(model, ids, 8, attention_mask=mask)  # (3, L + 8)
    eos = int(greedy[2, L])  # the third row ends at once
    assert eos not in greedy[1, L:] and (greedy[2, L:] != eos).any()  # what makes this a test
    out = generate(model, ids, 8, attention_mask=mask, eos_token_id=eos)
    assert out.shape == greedy.shape  # the second row never ends: all 8 steps run
    for r in range(3):  # each row as greedy up to its first eos, then eos only
        new = greedy[r, L:].tolist()
        stop = L + new.index(eos) if eos in new else out.shape[1]
        assert torch.equal(out[r, :stop], greedy[r, :stop]) and (out[r, stop:] == eos).all()
    # a list of ids: a row ends at any of them and repeats the one it ended with
    first = greedy[:, L].tolist()
    listed = generate(model, ids, 8, attention_mask=mask, eos_token_id=sorted(set(first)))
    assert listed.shape == (3, L + 1) and listed[:, L].tolist() == first  # all done: stops


def test_padded_generation_past_the_context_crops_the_mask_too():
    model = tiny_model(max_position_embeddings=12)
    rows = prompts((3, 9))
    ids, mask = left_pad(rows)
    out = generate(model, ids, 10, attention_mask=mask)  # 9 + 10 > 12: the window is cropped
    assert out.shape == (2, 19)
    longest = generate(model, torch.tensor([rows[1]]), 10)  # the unpadded row is as alone
    assert torch.equal(out[1], longest[0])


def test_an_unmasked_batch_keeps_the_causal_path_bit_for_bit():
    model = tiny_model()
    ids = torch.randint(0, 100, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        h = model.transformer.embeddings(ids)
        for block in model.transformer.blocks:
            h = block(h, is_causal=True)
        by_hand = model.lm_head(model.transformer.final_norm(h),
                                model.transformer.embeddings.word_embeddings.weight)
        assert torch.equal(model.logits(ids), by_hand)
        masked = model.logits(ids, attention_mask=torch.ones_like(ids))
    torch.testing.assert_close(masked, by_hand, **TOL)
    assert math.isclose(F.cross_entropy(masked[0], ids[0]).item(),
                        F.cross_entropy(by_hand[0], ids[0]).item(), rel_tol=1e-5)
