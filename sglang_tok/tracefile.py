"""The trace format: input frames exactly as they cross the ring, with their send times.

    b"SGTKTRC1"
    u32 length + JSON metadata   {"tokenizer": ..., "created": ..., "description": ...}
    records: f64 seconds since the trace start, u32 length, the frame (tag byte included)

A frame is any protocol input frame, so a recorded trace of a real scheduler replays as
is. What each request must produce is derived from the frames themselves (`requests`):
its OPEN options, every id it received, and how it ended, fed to the protocol's
reference (`sglang_tok.kit.workload.expected`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"SGTKTRC1"
_REC = struct.Struct("<dI")


class Recorder:
    """A trace appended to as frames arrive, by a process that may be restarted: the
    header goes in once (an existing trace is continued), each record in one write, and
    what is buffered reaches the file at `flush` (the caller's few times a second) and at
    `close`."""

    def __init__(self, path: str | Path, meta: dict[str, Any]) -> None:
        self.f: BinaryIO = open(path, "ab")
        if self.f.tell() == 0:
            head = json.dumps(meta).encode()
            self.f.write(MAGIC + struct.pack("<I", len(head)) + head)
        else:  # a restarted recorder goes on with the trace's own clock
            meta = _meta(Path(path))
        self.t0 = float(meta.get("t0", 0.0))
        self.count = 0

    def write(self, t: float, frame: bytes | memoryview) -> None:
        self.f.write(_REC.pack(t - self.t0, len(frame)))
        self.f.write(frame)
        self.count += 1

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.f.close()


class TraceWriter:
    def __init__(self, path: str | Path, meta: dict[str, Any]) -> None:
        self.f: BinaryIO = open(path, "wb")
        head = json.dumps(meta).encode()
        self.f.write(MAGIC + struct.pack("<I", len(head)) + head)
        self.count = 0

    def write(self, t: float, frame: bytes) -> None:
        self.f.write(_REC.pack(t, len(frame)))
        self.f.write(frame)
        self.count += 1

    def close(self) -> None:
        self.f.close()


@dataclass
class Trace:
    meta: dict[str, Any]
    times: list[float]
    frames: list[bytes]


def _meta(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        head = f.read(12)
        if head[:8] != MAGIC:
            raise ValueError(f"{path} is not an sglang-tok trace")
        (hlen,) = struct.unpack_from("<I", head, 8)
        meta: dict[str, Any] = json.loads(f.read(hlen))
    return meta


def read(path: str | Path) -> Trace:
    data = Path(path).read_bytes()
    if data[:8] != MAGIC:
        raise ValueError(f"{path} is not an sglang-tok trace")
    (hlen,) = struct.unpack_from("<I", data, 8)
    meta = json.loads(data[12:12 + hlen])
    pos = 12 + hlen
    times, frames = [], []
    while pos < len(data):
        t, n = _REC.unpack_from(data, pos)
        pos += _REC.size
        times.append(t)
        frames.append(data[pos:pos + n])
        pos += n
    return Trace(meta, times, frames)
