"""The one interface every protocol gives the service: a `Reader` the egress turns each input
frame into an `Event` with, and a `Writer` the shards and the egress send their output with.
Each protocol's pair is chosen once per process from `Config` (`registry.protocol_of`), so
no process holds a protocol test of its own.

A reader validates a frame whole (raising `FrameError`: the egress drops it and tells its
rids); the events are plain data the egress routes the same way whatever the protocol.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from sglang_tok.protocols.model.batch import Batch
from sglang_tok.protocols.model.control import Abort, Error, Open, Result
from sglang_tok.protocols.model.output import Sink
from sglang_tok.protocols.model.tags import TAG_BATCH

# the route code of a row no shard decodes (its rid has ended); above every slot code. A
# route code is slot * nshards + shard: with one shard, the slot itself
LATE = (1 << 32) - 1
Routed = Open | Error | Abort | Result  # the control frames the egress routes to shards
Message = tuple[str | None, bytes]  # (endpoint, None: --output; the message)


class Carry(Protocol):
    """What a protocol's replies carry of the input message beside the decoded texts (SGLang:
    the fields its detokenizer passes on), cut by the egress into each shard's part once it
    knows where the rows go. `keys`: each row's reply endpoint as a small int where the
    rows name several (a shard's rows are then ordered by it), else None."""

    keys: Any

    def whole(self, inline: bool) -> Any:
        """The one part of a message whose rows all go to one shard and one endpoint,
        packed (`inline`: the object, for a shard in the egress's process)."""
        ...

    def parts(self, order: Any, first: Any, shards: list[int], keys: Any,
              inline: bool) -> dict[int, Any]:
        """Each shard's part, packed unless `inline`: its rows are `order[first[s]:
        first[s + 1]]` (grouped by shard, then by key); `keys`: each row's key in that order
        (None: one endpoint)."""
        ...


class Rows(msgspec.Struct):
    """A frame's rows to route. `opens` (first rows' options), `fresh` (first rows with
    the default ones), `ends` ((rid, why): requests to end on their shards before the rows)
    and `lost` (rids first seen mid-stream) are what a protocol whose first rows carry a
    request's start says. A reader that has looked the rows up already gives their route
    codes (`codes`: -1 for a rid with none) and the rows with a finish (`finished`), so
    the router reads neither again; `carry` is what each shard's replies pass on.
    A struct with shared empty defaults: a native BATCH frame builds one per frame."""

    batch: Batch
    tag: int = TAG_BATCH
    opens: Sequence[Open] = ()
    fresh: Sequence[str] = ()
    ends: Sequence[tuple[str, str]] = ()
    lost: Sequence[str] = ()
    codes: list[int] | None = None
    finished: list[int] | None = None
    carry: Carry | None = None


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
class Relay:
    """Messages relayed to the frontend as they came, each to its endpoint (None: --output)."""

    parts: list[Message]


@dataclass
class Idle:
    """A frame with nothing to decode or answer (SGLang's idle batch, its GC and logging
    requests, whose effect the reader applied)."""

    what: str


Event = Rows | Control | Probe | Relay | Idle


class Reader(Protocol):
    def read(self, frame: memoryview, where: dict[str, int],
             ended: Container[str] = ()) -> Event:
        """The frame's event (`where`: the router's route code of each live rid, `ended`
        the rids it remembers ended); raise FrameError to drop it whole."""
        ...


class Workers(Protocol):
    """Where each live request's rows go, for a protocol whose replies go to several
    endpoints (SGLang's tokenizer workers: `protocols/sglang/workers.py`)."""

    def note(self, rids: Sequence[str], ipcs: Sequence[str | None]) -> None: ...

    def of(self, rids: Sequence[str]) -> list[str | None]: ...

    def ended(self, rids: Iterable[str]) -> None: ...


class Writer(Protocol):
    sent: int  # messages sent so far (the ledger of endings counts them)

    @property
    def workers(self) -> Workers | None:
        """Each live request's endpoint, where replies go to several (None: one --output)."""
        ...

    def sink(self) -> Sink:
        """An empty sink for one input message's deltas."""
        ...

    def messages(self, out: Sink, extra: Any, source: int) -> list[Message]:
        """The output messages for a sink's deltas; `extra`: what the input message's
        replies pass on (SGLang: packed, or the object from an egress in-process),
        `source`: the sender (a shard, or EGRESS)."""
        ...

    def restarted(self, source: int, pid: int) -> list[Message]:
        """What a restarted sender says first."""
        ...

