"""Messages on the service's internal links; they never leave the service.

egress -> shard: one byte kind, then:
  FORWARD: f64 ring-receive time (time.monotonic, system-wide on Linux) + an input frame
           (a per-shard BATCH, or OPEN/ERROR/ABORT/RESULT/PING as received)
  DROP:    msgpack [message, rids]: rids of a dropped frame; end each with that error
  SYNC:    a new egress: fail every live rid, say Hello again, wait for START
  START:   the egress knows this incarnation; process what follows
  EXIT:    shutdown: everything before this was sent; flush deltas and exit
shard -> egress and supervisor -> egress: the tagged msgspec structs below.
"""

from __future__ import annotations

import struct

import msgspec

FORWARD = b"F"
DROP = b"D"
SYNC = b"S"
START = b"G"
STAMP = struct.Struct("<d")


class Hello(msgspec.Struct, tag="hello", array_like=True):
    """A shard incarnation announcing itself; a new pid means the old one died."""

    shard: int
    pid: int


class Ended(msgspec.Struct, tag="ended", array_like=True):
    """Rids a shard ended on its own (service stop strings, refusals)."""

    shard: int
    rids: list[str]


class Ack(msgspec.Struct, tag="ack", array_like=True):
    """A shard has processed this many FORWARD messages since its START."""

    shard: int
    count: int


class ShardDown(msgspec.Struct, tag="down", array_like=True):
    """The supervisor reaped a shard: fail its live rids now, hold its traffic."""

    shard: int
    pid: int


class Drain(msgspec.Struct, tag="drain", array_like=True):
    """Shutdown: stop reading the input ring, finish what was read, then exit."""


Notice = Hello | Ended | Ack | ShardDown | Drain
notice_encoder = msgspec.msgpack.Encoder()
notice_decoder = msgspec.msgpack.Decoder(Notice)
drop_decoder = msgspec.msgpack.Decoder(tuple[str, list[str]])
EXIT = b"X"


def forward(stamp: float, frame: bytes | memoryview) -> bytes:
    return b"".join((FORWARD, STAMP.pack(stamp), frame))
