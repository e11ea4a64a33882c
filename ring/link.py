"""Every message on the service's internal links, built and parsed here; none leaves the service.

egress -> shard (`parse` gives one of the structs below; byte 0 is the kind):
  FORWARD `F`: f64 ring-receive time (time.monotonic, system-wide on Linux) + an input frame
           (a BATCH whose rows are all this shard's, or OPEN/ERROR/ABORT/RESULT/PING)
  ROWS `R`:    f64 ring-receive time + u32 n + n owner bytes + a whole BATCH frame: the
           shard decodes only the rows whose owner byte is its index. With N > 1 shards
           this hands each shard its bucket with one message per shard per frame, without
           re-encoding the frame per shard (a shard skips another's row in ~0.1 us)
  DROP `D`:    msgpack `Drop`: rids of a dropped frame; end each with that error
  SYNC `S`:    u64 egress token: fail every live rid, say Hello with the token, wait for
           START. A shard speaks only when asked: its first Hello answers a SYNC, so an
           egress starts each incarnation exactly once and tells a reply meant for a dead
           egress (another token) from one meant for itself
  START `G`:   the egress knows this incarnation; process what follows
  EXIT `X`:    shutdown: everything before this was sent; flush deltas and exit
shard -> egress (back channel) and supervisor -> egress: the tagged `Notice` structs.

FORWARD and ROWS carry the scheduler's frame as it came: the prefix is joined in front of
it once, and `parse` hands the shard a view of it, never a copy.
"""

from __future__ import annotations

import struct

import msgspec

LATE = 255  # owner byte of a row no shard decodes (its rid has ended)
_FORWARD, _ROWS, _DROP, _SYNC = b"F", b"R", b"D", b"S"
START, EXIT = b"G", b"X"
_STAMP = struct.Struct("<d")
_TOKEN = struct.Struct("<Q")
_ROWS_HEAD = struct.Struct("<dI")


# --------------------------------------------------------------------------- egress -> shard
class Frame(msgspec.Struct, gc=False):
    """A FORWARD or ROWS message: the input frame and, for ROWS, the owner byte of each row."""

    stamp: float
    frame: memoryview
    owners: memoryview | None = None


class Drop(msgspec.Struct, array_like=True, gc=False):
    """The egress dropped a frame: end these rids with this error."""

    message: str
    rids: list[str]


class Sync(msgspec.Struct, gc=False):
    token: int


class Start(msgspec.Struct, gc=False):
    pass


class Exit(msgspec.Struct, gc=False):
    pass


Inbound = Frame | Drop | Sync | Start | Exit
_SIGNALS: dict[int, Start | Exit] = {START[0]: Start(), EXIT[0]: Exit()}
_drop_encoder = msgspec.msgpack.Encoder()
_drop_decoder = msgspec.msgpack.Decoder(Drop)


def forward(stamp: float, frame: bytes | memoryview) -> bytes:
    return b"".join((_FORWARD, _STAMP.pack(stamp), frame))


def rows(stamp: float, owners: bytes, frame: bytes | memoryview) -> bytes:
    return b"".join((_ROWS, _ROWS_HEAD.pack(stamp, len(owners)), owners, frame))


def sync(token: int) -> bytes:
    return _SYNC + _TOKEN.pack(token)


def drop(message: str, rids: list[str]) -> bytes:
    return _DROP + _drop_encoder.encode(Drop(message, rids))


def parse(msg: bytes | memoryview) -> Inbound:
    """One egress -> shard message; raise ValueError for one no egress builds."""
    mv = memoryview(msg)
    kind = mv[0] if len(mv) else -1
    if kind == _ROWS[0]:
        stamp, n = _ROWS_HEAD.unpack_from(mv, 1)
        head = 1 + _ROWS_HEAD.size
        return Frame(stamp, mv[head + n:], mv[head:head + n])
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
    """A shard's answer to the SYNC carrying `token`: its live rids are failed (an `Ended`
    listing them went just before), it waits for START. A new pid is a new incarnation."""

    shard: int
    pid: int
    token: int


class Ended(msgspec.Struct, tag="ended", array_like=True, gc=False):
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


Notice = Hello | Ended | Ack | ShardDown | Drain
notice_encoder = msgspec.msgpack.Encoder()
notice_decoder = msgspec.msgpack.Decoder(Notice)
