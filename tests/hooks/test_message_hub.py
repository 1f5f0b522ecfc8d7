import torch

from libai.utils.message_hub import MessageHub


def test_history_is_bounded_and_means_are_count_weighted():
    hub = MessageHub(max_history=3)
    for i, count in enumerate([1, 1, 1, 2, 3]):
        hub.update_scalar("loss", float(i), count=count)
    assert list(hub.history("loss").values) == [2.0, 3.0, 4.0]  # the oldest two dropped
    assert hub.mean("loss") == (2 * 1 + 3 * 2 + 4 * 3) / 6
    assert hub.mean("loss", window=1) == 4.0 and hub.latest("loss") == 4.0


def test_state_round_trip_is_exact_and_keeps_history_objects():
    hub = MessageHub()
    kept = hub.history("train/time")  # what IterTimerHook holds on to
    for v in (0.1, 1 / 3, 2.5e-7):
        kept.values.append(v)
        kept.counts.append(1)
    hub.update_scalar("train/loss", 0.7, count=50, step=50)
    state = hub.state_dict()
    assert state["scalars"]["train/time"]["values"].dtype == torch.float64  # one object to pickle

    other = MessageHub()
    same = other.history("train/time")
    other.update_scalar("stale", 1.0)
    other.load_state_dict(state)
    assert same is other.history("train/time")  # refilled in place
    assert list(same.values) == [0.1, 1 / 3, 2.5e-7]  # bit-exact through float64
    assert other.mean("train/loss") == 0.7 and other.last_step("train/loss") == 50
    assert not other.has("stale")  # absent from the state: emptied


def test_an_older_state_with_lists_loads():
    hub = MessageHub()
    hub.load_state_dict({"scalars": {"a": {"values": [1.0, 2.0], "counts": [1, 3], "last_step": 4}}})
    assert hub.mean("a") == (1.0 + 6.0) / 4 and hub.last_step("a") == 4
