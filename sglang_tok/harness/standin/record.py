"""A recorded SGLang server's scheduler messages, read back as the streams the stand-in
replays.

The plugin records (`SGLANG_TOK_RECORD=PATH`: `sglang-tok serve --record PATH`) every
message the scheduler sent the detokenizer, as it came, in the project's trace format
(`sglang_tok.tracefile`: each frame with its time). Replayed, each recorded request
gives the ids of each of its rows in order and how it ended; the stand-in hands them to
new requests in the order the recording first saw them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from sglang_tok.protocols.sglang import wire
from sglang_tok.tracefile import read

Recording = tuple[list[list[int]], dict[str, Any] | None]
_ids_rows = msgspec.msgpack.Decoder(list[msgspec.msgpack.Ext | list[int]])


def recordings(path: str | Path) -> list[Recording]:
    """Per recorded request, in order of its first row: its ids per row, its finish."""
    trace = read(path)
    proto = trace.meta.get("protocol", "sglang")
    if proto != "sglang":
        raise ValueError(f"{path}: a {proto} trace, not SGLang scheduler messages")
    chunks: dict[str, list[list[int]]] = {}
    ends: dict[str, dict[str, Any] | None] = {}
    for frame in trace.frames:
        try:
            msg = wire.inbound_decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # a message the service dropped too
        if not isinstance(msg, wire.TokenIds) or not msg.rids:
            continue
        rows = _ids_rows.decode(msg.output_ids) if wire.array_length(msg.output_ids) > 0 \
            else [[] for _ in msg.rids]
        fins = msg.finished_reasons or [None] * len(msg.rids)
        for rid, row, fin in zip(msg.rids, rows, fins):
            if rid in ends and ends[rid] is not None:
                continue  # a rid used again: the recording keeps its first life
            ids = memoryview(wire.int64_bytes(row)).cast("q").tolist()
            chunks.setdefault(rid, []).append(ids)
            ends[rid] = fin
    return [(chunks[rid], ends[rid]) for rid in chunks]
