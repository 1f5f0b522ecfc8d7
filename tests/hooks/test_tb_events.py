"""libai's own TensorBoard event writer: the checksums and records TensorBoard itself reads."""

import os

import pytest
import torch

from libai.visualization.tb_events import EventFileWriter, crc32c, masked_crc32c


def test_crc32c_matches_the_standard_and_tensorboard():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference

    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    for n in (0, 1, 8, 151, 1000):
        data = os.urandom(n)
        assert masked_crc32c(data) == reference(data)


def test_events_and_purge_marker_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = EventFileWriter(str(tmp_path), flush_secs=1000)
    for step in range(1, 7):
        first.add_scalars({"train/loss": 1.0 / step, "train/lr": 0.1}, step, wall_time=float(step))
    first.close()
    resumed = EventFileWriter(str(tmp_path), purge_step=4)  # resumed from step 3
    for step in range(4, 6):
        resumed.add_scalars({"train/loss": 10.0 + step}, step)
    resumed.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    loss = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert loss == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3)), (4, 14.0), (5, 15.0)]
    assert [e.step for e in events.Scalars("train/lr")] == [1, 2, 3]


def test_files_of_one_second_sort_in_the_order_written(tmp_path, monkeypatch):
    """TensorBoard reads a folder's event files in name order: the 10th writer of a process
    (a long test worker, a sweep) must sort after the 9th, or a resumed run's purge marker
    comes first and the purged steps come back."""
    import itertools

    from libai.visualization import tb_events

    monkeypatch.setattr(tb_events, "_file_ids", itertools.count(9))
    monkeypatch.setattr(tb_events.time, "time", lambda: 1_700_000_000.0)
    paths = []
    for _ in range(2):
        writer = EventFileWriter(str(tmp_path))
        paths.append(writer.path)
        writer.close()
    assert sorted(paths) == paths


def test_histogram_buckets_without_histc_match_histc():
    """Under deterministic algorithms on CUDA histc raises (it has no deterministic kernel): the
    bincount path that replaces it there counts the same buckets (checked here on the CPU)."""
    from libai.visualization.histogram import _bincount_buckets

    for seed in range(3):
        t = torch.randn(10_000, generator=torch.Generator().manual_seed(seed))
        lo, hi = float(t.min()), float(t.max())
        assert torch.equal(_bincount_buckets(t, 64, lo, hi), torch.histc(t, bins=64, min=lo, max=hi))
