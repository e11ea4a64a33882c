"""What the egress reads off its input ring: one reader per protocol, chosen once in
`egress.main` from `Config.protocol`, each turning a frame into one event the egress
routes the same way whatever the protocol.

- `NativeReader`: BATCH frames and the control frames (docs/protocol.md sections 2-4).
- `sglang_in.SglangReader`: SGLang's scheduler messages (section 11).

A reader validates a frame whole (raising `FrameError`: the egress drops it and tells its
rids); the events are plain data, so the egress holds no protocol test of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from sglang_tok import protocol
from sglang_tok.protocol import Batch, FrameError, Open, Ping

from .control import Routed


class Rows(msgspec.Struct):
    """A frame's rows to route. `opens` (first rows' options), `fresh` (first rows with
    the default ones), `ends` ((rid, why): requests to end on their shards before the rows)
    and `lost` (rids first seen mid-stream) are what a protocol whose first rows carry a
    request's start says; `passed(codes, nshards)` cuts what each shard's replies pass on.
    A struct with shared empty defaults: a native BATCH frame builds one per frame."""

    batch: Batch
    tag: int = protocol.TAG_BATCH
    opens: Sequence[Open] = ()
    fresh: Sequence[str] = ()
    ends: Sequence[tuple[str, str]] = ()
    lost: Sequence[str] = ()
    passed: Passer | None = None


class Passer(Protocol):
    def __call__(self, codes: list[int], nshards: int, inline: bool = False
                 ) -> dict[int, Any]:
        """Each shard's part, packed (or, `inline`, the one shard's as an object)."""
        ...


@dataclass
class Control:
    """OPEN, ERROR, ABORT or RESULT: routed to its shards, the frame forwarded as it came."""

    msg: Routed
    frame: memoryview
    tag: int


@dataclass
class Probe:
    """A PING: a barrier (nonce >= 0) or a health probe (nonce < 0), through every shard.
    `counted`: it is one of the protocol's frames (the frames metric counts it)."""

    nonce: int
    frame: memoryview
    counted: bool = True


@dataclass
class PassOn:
    """Messages that go to the frontend as they came, each to its endpoint (None: --output)."""

    parts: list[tuple[str | None, bytes]]


@dataclass
class Idle:
    """A frame with nothing to decode or answer (SGLang's idle batch, its GC and logging
    requests, whose effect the reader applied)."""

    what: str


Event = Rows | Control | Probe | PassOn | Idle


class Reader(Protocol):
    def read(self, frame: memoryview, where: dict[str, int]) -> Event:
        """The frame's event (`where`: the router's route code of each live rid); raise
        FrameError to drop it whole."""
        ...


class NativeReader:
    """The native protocol: BATCH frames, and control frames forwarded as they came."""

    def __init__(self, max_rid_length: int, max_row_ids: int) -> None:
        self.max_rid_length = max_rid_length
        self.max_row_ids = max_row_ids

    def read(self, frame: memoryview, where: dict[str, int]) -> Event:
        tag = frame[0]
        if tag == protocol.TAG_BATCH:
            return Rows(protocol.decode_batch(frame, self.max_rid_length, self.max_row_ids))
        msg = protocol.decode_control(frame)
        if isinstance(msg, Ping):
            return Probe(msg.nonce, frame)
        if isinstance(msg, Open) and len(msg.rid) > self.max_rid_length:
            raise FrameError("limit_rid_length",
                             f"rid longer than --max-rid-length {self.max_rid_length}")
        return Control(msg, frame, tag)
