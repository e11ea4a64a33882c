"""The rows of BATCH frames: a frame's rows, the lean peer's work on them (one `tokenizers`
DecodeStream per rid), and the frames as the egress routes them to one shard."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sglang_tok.protocols.model import batch as native_batch

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from ring.link import Arrays


def batch_rows(frame: bytes) -> list[tuple[str, list[int]]]:
    """A BATCH frame's rows: (rid, ids) in order."""
    b = native_batch.decode_batch(frame)
    ids, st = b.token_ids(), b.tokens.row_starts
    return [(rid, ids[st[i]:st[i + 1]]) for i, rid in enumerate(b.rids)]


def decodestream_rows(tok: Tokenizer, frames: Iterable[list[tuple[str, list[int]]]]) -> None:
    """The lean peer's work on frames of rows: one `tokenizers` DecodeStream per rid,
    stepped once per id; where a step raises (a byte run cut mid-character), that rid's
    stream starts again."""
    from tokenizers.decoders import DecodeStream

    streams: dict[str, DecodeStream] = {}
    for rows in frames:
        for rid, ids in rows:
            ds = streams.get(rid)
            if ds is None:
                ds = streams[rid] = DecodeStream(skip_special_tokens=True)
            for i in ids:
                try:
                    ds.step(tok, i)
                except Exception:
                    streams[rid] = ds = DecodeStream(skip_special_tokens=True)


def route_arrays(batches: Iterable[native_batch.Batch], rids: Iterable[str] = ()) -> list[Arrays]:
    """The frames as the egress routes them to one shard (ARRAYS messages), `rids` opened
    first; done before any clock starts, since the egress is another process."""
    from ring import link
    from sglang_tok_testkit.local_route import LocalRoute

    route = LocalRoute(1)
    for rid in rids:
        route.open(rid)
    msgs = []
    for batch in batches:
        for raw in route(batch).values():
            msg = link.parse(raw)
            assert isinstance(msg, link.Arrays)
            msgs.append(msg)
    return msgs
