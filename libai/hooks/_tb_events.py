"""TensorBoard event files, written directly: TFRecord-framed ``Event`` protos, no thread.

``torch.utils.tensorboard.SummaryWriter`` hands every event to a writer thread, which then takes
the GIL from the training loop to checksum it in Python, a context switch per logged step that
showed in the training time. Here events are framed in the calling thread into a buffered file,
flushed every ``flush_secs`` and on close (``TensorboardBackend`` hands them over in batches). The file name, the leading
``file_version`` event and the purge marker are those SummaryWriter writes, so TensorBoard reads
these files exactly like its own.

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

__all__ = ["EventFileWriter", "crc32c", "masked_crc32c"]


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_TABLE = _crc_table()
_file_ids = itertools.count()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


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
                f"{os.getpid()}.{next(_file_ids)}")
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
