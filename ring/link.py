"""Messages on the service's internal links; they never leave the service.

egress -> shard: one byte kind, then:
  FORWARD: f64 ring-receive time (time.monotonic, system-wide on Linux) + an input frame
           (a BATCH whose rows are all this shard's, or OPEN/ERROR/ABORT/RESULT/PING)
  ROWS:    f64 ring-receive time + u32 n + n bytes of row owners + a whole BATCH frame:
           the shard decodes only the rows whose owner byte is its index. With N > 1
           shards this is how the egress hands each shard its bucket: one message per
           shard per frame, without re-encoding the frame per shard (`split_batch` cost
           ~1 us per row in the egress; a shard skips another's row in ~0.1 us)
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
ROWS = b"R"
LATE = 255  # owner byte of a row no shard decodes (its rid has ended)
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


def rows(stamp: float, owners: bytes, frame: bytes | memoryview) -> bytes:
    return b"".join((ROWS, STAMP.pack(stamp), len(owners).to_bytes(4, "little"), owners, frame))
