"""Which rids may still be waiting for their last delta, in a file that outlives the egress.

The egress alone knows a dead shard's rids. If the egress dies too before their error
deltas left it (the double fault), a replacement must still fail them, so each rid's first
row or OPEN and its certain end are appended here, one record per frame or notice that
has any (a steady decode frame has none: the cost is one `write` per frame that opens a
request). A rid's end is written only once it cannot be undone: the shard acknowledged
the message that ended it, the shard ended it itself, or the egress sent its error.

A record is a u32 length and a msgpack `Record`. A `write` to an O_APPEND file survives
the death of the process that made it, and a torn last record (the egress killed in the
middle of one) is ignored on replay: its rids are still listed as open by earlier records,
or were not yet routed. When the file outgrows its live set it is rewritten as one record.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path

import msgspec

FILENAME = "egress.journal"  # in the runtime directory
_LEN = struct.Struct("<I")
MIN_COMPACT_BYTES = 1 << 20


class Record(msgspec.Struct, array_like=True, gc=False):
    opened: list[str]
    ended: list[str]
    # with --protocol sglang and tokenizer workers: each opened rid's worker (where its
    # error must go when a replacement fails it); [] when none is known
    workers: list[str | None] = []


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def replay(path: Path) -> dict[str, str | None]:
    """The rids a dead egress's journal left open, in the order they opened, each with its
    tokenizer worker where one was written."""
    live: dict[str, str | None] = {}
    try:
        raw = memoryview(path.read_bytes())
    except FileNotFoundError:
        return live
    pos = 0
    while pos + _LEN.size <= len(raw):
        (size,) = _LEN.unpack_from(raw, pos)
        pos += _LEN.size
        if pos + size > len(raw):
            break  # torn by the death of its writer
        try:
            rec = _decoder.decode(raw[pos:pos + size])
        except msgspec.DecodeError:
            break
        pos += size
        if rec.workers:
            live.update(zip(rec.opened, rec.workers))
        else:
            live.update(dict.fromkeys(rec.opened))
        for rid in rec.ended:
            live.pop(rid, None)
    return live


class Journal:
    """The egress's side: append events; keep the live set to rewrite the file from."""

    def __init__(self, path: Path, live: dict[str, str | None] | None = None) -> None:
        self.path = path
        self.live: dict[str, str | None] = {}
        self.fd = -1
        self.size = 0
        self._rewrite(live or {})

    def write(self, opened: Iterable[str] = (), ended: Iterable[str] = (),
              workers: list[str | None] | None = None) -> None:
        """`workers`: each opened rid's tokenizer worker, aligned with `opened` (or none)."""
        # a rid can end twice between two acknowledgements (ended, OPENed again, ended)
        opened, ended = list(opened), [r for r in dict.fromkeys(ended) if r in self.live]
        if not opened and not ended:
            return
        if workers:
            self.live.update(zip(opened, workers))
        else:
            self.live.update(dict.fromkeys(opened))
            workers = []
        for rid in ended:
            del self.live[rid]
        self._append(Record(opened, ended, workers))
        if self.size > MIN_COMPACT_BYTES and self.size > 64 * (len(self.live) + 1024):
            self._rewrite(self.live)

    def _append(self, rec: Record) -> None:
        body = _encoder.encode(rec)
        self.size += os.write(self.fd, _LEN.pack(len(body)) + body)

    def _rewrite(self, live: dict[str, str | None]) -> None:
        """The file as one record of the live set, swapped in whole (rename is atomic)."""
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        old, self.fd, self.size = self.fd, fd, 0
        self.live = dict(live)
        if live:
            workers = list(live.values())
            self._append(Record(list(live), [], workers if any(workers) else []))
        os.replace(tmp, self.path)
        if old >= 0:
            os.close(old)

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink(missing_ok=True)
