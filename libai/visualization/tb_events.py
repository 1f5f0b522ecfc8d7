"""TensorBoard event files, written directly: TFRecord-framed ``Event`` protos, no thread.

Why not the library's writers (measured with ``benchmarks/overhead.py``'s whole-process figure,
3000 iterations of a tiny MLP, ~3.4 s a process): ``torch.utils.tensorboard.SummaryWriter``
takes 0.125 s to import (tensorboard's TensorFlow stub, numpy paths), 3.7% of that process on
its own, and hands every event to a writer thread that takes the GIL from the training loop;
tensorboard's thread-free ``RecordWriter`` imports the same stub (0.127 s). What is left here is
the record framing, a few lines; the checksum is Google's CRC-32C library (``google-crc32c``,
C, 3 ms to import). The file name, the leading ``file_version`` event and the purge marker are
those SummaryWriter writes, so TensorBoard reads these files exactly like its own (tested).

Record framing (little-endian): uint64 length, uint32 masked CRC-32C of the length, the bytes,
uint32 masked CRC-32C of the bytes.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from typing import Any

import google_crc32c

__all__ = ["EventFileWriter", "crc32c", "masked_crc32c"]


_file_ids = itertools.count()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    return google_crc32c.value(data)


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: CRC-32C rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventFileWriter:
    """One new event file in ``log_dir``, written synchronously.

    Args:
        log_dir: Folder of the file (created if missing).
        purge_step: After a resume, the first step this run writes: TensorBoard then hides the
            events an earlier attempt wrote at this step or later. Defaults to None.
        flush_secs: Longest time written events wait in the file buffer. Defaults to 10.

    Raises:
        ImportError: the ``tensorboard`` package (its protos) is not installed.
    """

    def __init__(self, log_dir: str, purge_step: int | None = None, flush_secs: float = 10) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._event, self._summary = Event, Summary
        os.makedirs(log_dir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid():07d}.{next(_file_ids):06d}")  # padded: file 10 sorts after 9
        self.path = os.path.join(log_dir, name)
        self._file: Any = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self.flush_secs = flush_secs
        self._flushed_at = time.monotonic()
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:  # what SummaryWriter(purge_step=...) writes
            self._write(Event(step=purge_step, file_version="brain.Event:2"))
            self._write(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))
        self.flush()

    def add_scalars(self, scalars: dict[str, float], step: int, wall_time: float | None = None) -> None:
        """One event holding every ``{tag: value}`` of ``step`` (what TensorBoard plots)."""
        values = [self._summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        self._write(self._event(wall_time=time.time() if wall_time is None else wall_time,
                                step=int(step), summary=self._summary(value=values)))
        if time.monotonic() - self._flushed_at >= self.flush_secs:
            self.flush()

    def add_histogram(self, tag: str, hist: Any, step: int, wall_time: float | None = None) -> None:
        """One event holding a histogram (``HistogramProto``, what TensorBoard's HISTOGRAMS and
        DISTRIBUTIONS tabs draw).

        Args:
            tag: Its name.
            hist: Has ``counts`` (per bucket), ``edges`` (one more than ``counts``) and the
                ``min``, ``max``, ``num``, ``sum`` and ``sum_squares`` of the values, like
                ``backends.Histogram``.
            step: The step.
            wall_time: Defaults to None (now).
        """
        from tensorboard.compat.proto.summary_pb2 import HistogramProto

        # bucket_limit holds each bucket's right edge; TensorBoard takes min as the first left
        proto = HistogramProto(min=float(hist.min), max=float(hist.max), num=float(hist.num),
                               sum=float(hist.sum), sum_squares=float(hist.sum_squares),
                               bucket_limit=[float(e) for e in hist.edges[1:]],
                               bucket=[float(c) for c in hist.counts])
        value = self._summary.Value(tag=tag, histo=proto)
        self._write(self._event(wall_time=time.time() if wall_time is None else wall_time,
                                step=int(step), summary=self._summary(value=[value])))
        if time.monotonic() - self._flushed_at >= self.flush_secs:
            self.flush()

    def _write(self, event: Any) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", masked_crc32c(header)) + data
                         + struct.pack("<I", masked_crc32c(data)))

    def flush(self) -> None:
        self._file.flush()
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
