"""Every message on the service's internal links, built and parsed here; none leaves the service.

egress -> shard (`parse` gives one of the structs below; byte 0 is the kind):
  FORWARD `F`: f64 ring-receive time (time.monotonic, system-wide on Linux) + a control
           frame (OPEN/ERROR/ABORT/RESULT/PING) as the scheduler sent it
  ARRAYS `A`:  f64 ring-receive time + u32 n + u32 m + n u32 slots + m i64 ids + msgpack
           `Sparse`: a BATCH frame's rows of this shard as numeric columns. The egress has
           read the header; each rid has a slot in its shard (given with the rid in
           `Sparse.new` on its first row, free again once it ends), so a shard's steady
           state decodes no string and no map per row (shards/messages/table.py)
  DROP `D`:    msgpack `Drop`: rids of a dropped frame; end each with that error
  SYNC `S`:    u64 egress token: fail every live rid, say Hello with the token, wait for
           START. A shard speaks only when asked: its first Hello answers a SYNC, so an
           egress starts each incarnation exactly once and tells a reply meant for a dead
           egress (another token) from one meant for itself
  START `G`:   the egress knows this incarnation; process what follows
  EXIT `X`:    shutdown: everything before this was sent; flush deltas and exit
shard -> egress (back channel) and supervisor -> egress: the tagged `Notice` structs.

FORWARD carries the scheduler's frame as it came: the prefix is joined in front of it once,
and `parse` hands the shard a view of it, never a copy.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from sglang_tok.finish import Finish
from sglang_tok.logprob_rows import Family  # (name, rows, lens, poslens, values, ids)
from sglang_tok.protocols.model.control import Open

_FORWARD, _ARRAYS, _DROP, _SYNC = b"F", b"A", b"D", b"S"
START, EXIT = b"G", b"X"
_STAMP = struct.Struct("<d")
_TOKEN = struct.Struct("<Q")
_ARRAYS_HEAD = struct.Struct("<dII")
# a route code is slot * nshards + shard (LATE: no shard): with one shard, the slot itself


# --------------------------------------------------------------------------- egress -> shard
class Frame(msgspec.Struct, gc=False):
    """A FORWARD message: a control frame."""

    stamp: float
    frame: memoryview


class Sparse(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """What an ARRAYS message says about a few of its rows (row numbers index its rows)."""

    counts: bytes = b""  # u32 ids per row, when some row has other than one
    # (row, rid, prompt_tokens, cached_tokens): the rid's first row; its slot is new
    new: list[tuple[int, str, int, int]] = []
    # (row, finish, prompt_tokens, cached_tokens, reasoning_tokens): the rid's last row
    ends: list[tuple[int, Finish, int, int, int]] = []
    reasoning: bytes = b""  # u32 reasoning_tokens per row, when some row's is nonzero
    families: list[Family] = []
    # --protocol sglang: the scheduler's fields a reply carries, cut to these rows
    # (sglang_tok/protocols/sglang/part.py `Part`, packed)
    extra: bytes = b""
    # --protocol sglang: the options of first rows that are not the defaults, which the
    # shard takes as OPENs before the rows (one message, not one per request)
    opens: list[Open] = []


class Arrays(msgspec.Struct, gc=False):
    """An ARRAYS message: row r of this shard's part of a frame is slot `slots[r]`.
    `carried`: to a shard inside the egress's process, handed over as this object (never
    packed), what `sparse.extra` holds packed for a shard of its own."""

    stamp: float
    slots: npt.NDArray[np.uint32]
    ids: npt.NDArray[np.int64]
    sparse: Sparse
    carried: Any = None


class Drop(msgspec.Struct, array_like=True, gc=False):
    """The egress dropped a frame: end these rids with this error. `workers`: with
    --protocol sglang, each rid's tokenizer worker when the egress knows it ([] if none)."""

    message: str
    rids: list[str]
    workers: list[str | None] = []


class Sync(msgspec.Struct, gc=False):
    token: int


class Start(msgspec.Struct, gc=False):
    pass


class Exit(msgspec.Struct, gc=False):
    pass


Inbound = Frame | Arrays | Drop | Sync | Start | Exit
_SIGNALS: dict[int, Start | Exit] = {START[0]: Start(), EXIT[0]: Exit()}
_drop_encoder = msgspec.msgpack.Encoder()
_drop_decoder = msgspec.msgpack.Decoder(Drop)
_sparse_encoder = msgspec.msgpack.Encoder()
_sparse_decoder = msgspec.msgpack.Decoder(Sparse)
_NO_SPARSE = _sparse_encoder.encode(Sparse())


def forward(stamp: float, frame: bytes | memoryview) -> bytes:
    return b"".join((_FORWARD, _STAMP.pack(stamp), frame))


def arrays(stamp: float, slots: npt.NDArray[np.uint32], ids: npt.NDArray[np.int64],
           sparse: Sparse | None = None) -> bytes:
    """`slots` u32, `ids` int64, as numpy arrays (a shard's part of a shared frame)."""
    return _pack(stamp, len(slots), slots.astype(np.uint32, copy=False).tobytes(), len(ids),
                 ids.astype(np.int64, copy=False).tobytes(), sparse)


def frame_arrays(stamp: float, slots: array[int], ids: memoryview,
                 sparse: Sparse | None = None) -> bytes:
    """`arrays` for a frame that is one shard's whole: `array("I")` slots and the frame's
    own little-endian ids buffer, with no numpy call (the egress's route at small frames)."""
    return _pack(stamp, len(slots), slots.tobytes(), len(ids) >> 3, ids, sparse)


def _pack(stamp: float, n: int, slot_bytes: bytes, m: int, id_bytes: bytes | memoryview,
          sparse: Sparse | None) -> bytes:
    return b"".join((_ARRAYS, _ARRAYS_HEAD.pack(stamp, n, m), slot_bytes, id_bytes,
                     _NO_SPARSE if sparse is None else _sparse_encoder.encode(sparse)))


def sync(token: int) -> bytes:
    return _SYNC + _TOKEN.pack(token)


def drop(message: str, rids: list[str], workers: list[str | None] | None = None) -> bytes:
    return _DROP + _drop_encoder.encode(Drop(message, rids, workers or []))


def parse(msg: bytes | memoryview | Arrays) -> Inbound:
    """One egress -> shard message; raise ValueError for one no egress builds. An Arrays
    object (a shard inside the egress's process) is its own parse."""
    if isinstance(msg, Arrays):
        return msg
    mv = memoryview(msg)
    kind = mv[0] if len(mv) else -1
    if kind == _ARRAYS[0]:
        stamp, n, m = _ARRAYS_HEAD.unpack_from(mv, 1)
        at = 1 + _ARRAYS_HEAD.size
        slots = np.frombuffer(mv, np.uint32, n, at)
        ids = np.frombuffer(mv, np.int64, m, at + 4 * n)
        return Arrays(stamp, slots, ids, _sparse_decoder.decode(mv[at + 4 * n + 8 * m:]))
    if kind == _FORWARD[0]:
        return Frame(_STAMP.unpack_from(mv, 1)[0], mv[1 + _STAMP.size:])
    if kind == _DROP[0]:
        return _drop_decoder.decode(mv[1:])
    if kind == _SYNC[0]:
        return Sync(_TOKEN.unpack_from(mv, 1)[0])
    signal = _SIGNALS.get(kind)
    if signal is None:
        raise ValueError(f"unknown link message kind {kind}")
    return signal


# --------------------------------------------------------------------------- notices
class Hello(msgspec.Struct, tag="hello", array_like=True, gc=False):
    """A shard's answer to the SYNC carrying `token`: its live rids are failed (an `EndedNotice`
    listing them went just before), it waits for START. A new pid is a new incarnation."""

    shard: int
    pid: int
    token: int


class EndedNotice(msgspec.Struct, tag="ended", array_like=True, gc=False):
    """Rids a shard ended on its own (service stop strings, refusals)."""

    shard: int
    rids: list[str]


class Ack(msgspec.Struct, tag="ack", array_like=True, gc=False):
    """A shard has processed this many FORWARD and DROP messages since the START that
    followed the SYNC carrying `token`, and sent `sent` output messages since it began
    (some may still be in its socket queue: `egress.router.Ledger`); `usage` is
    (rid, completion tokens, reasoning tokens) of each rid it ended since its last Ack.
    `pid` tells a dead incarnation's last Acks (read after its death) from its
    replacement's."""

    shard: int
    count: int
    sent: int
    token: int
    pid: int
    usage: list[tuple[str, int, int]]


class ShardDown(msgspec.Struct, tag="down", array_like=True, gc=False):
    """The supervisor reaped a shard: fail its live rids now, hold its traffic."""

    shard: int
    pid: int


class Drain(msgspec.Struct, tag="drain", array_like=True, gc=False):
    """Shutdown: stop reading the input ring, finish what was read by `deadline`, exit.

    `deadline` is absolute (time.monotonic, system-wide on Linux): the supervisor's clock
    and the egress's are then one clock, and the egress's budget is not cut short by the
    time the notice took to arrive.
    """

    deadline: float


Notice = Hello | EndedNotice | Ack | ShardDown | Drain
notice_encoder = msgspec.msgpack.Encoder()
notice_decoder = msgspec.msgpack.Decoder(Notice)
