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
from sglang_tok.protocols.sglang.layout import Layout, builtin
from sglang_tok.tracefile import read

Recording = tuple[list[list[int]], dict[str, Any] | None]
_ids_rows = msgspec.msgpack.Decoder(list[msgspec.msgpack.Ext | list[int]])
_rids = msgspec.msgpack.Decoder(list[str] | None)
_fins = msgspec.msgpack.Decoder(list[dict[str, Any] | None] | None)


def recordings(path: str | Path) -> list[Recording]:
    """Per recorded request, in order of its first row: its ids per row, its finish."""
    trace = read(path)
    proto = trace.meta.get("protocol", "sglang")
    if proto != "sglang":
        raise ValueError(f"{path}: a {proto} trace, not SGLang scheduler messages")
    layout = trace.meta.get("sglang_layout")
    names = (msgspec.convert(layout, Layout) if layout else builtin()).token_ids
    at = {name: i + 1 for i, name in enumerate(names)}
    chunks: dict[str, list[list[int]]] = {}
    ends: dict[str, dict[str, Any] | None] = {}
    for frame in trace.frames:
        try:
            fields = wire.fields_decoder.decode(frame)
            if fields[0] != wire.TOKEN_IDS_TAG or len(fields) != len(names) + 1:
                continue  # another message, or one the service dropped too
            rids = _rids.decode(fields[at["rids"]])
            if not rids:
                continue
            output_ids = fields[at["output_ids"]]
            rows = _ids_rows.decode(output_ids) if wire.array_length(output_ids) > 0 \
                else [[] for _ in rids]
            fins = _fins.decode(fields[at["finished_reasons"]]) or [None] * len(rids)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # a message the service dropped too
        for rid, row, fin in zip(rids, rows, fins):
            if rid in ends and ends[rid] is not None:
                continue  # a rid used again: the recording keeps its first life
            ids = memoryview(wire.int64_bytes(row)).cast("q").tolist()
            chunks.setdefault(rid, []).append(ids)
            ends[rid] = fin
    return [(chunks[rid], ends[rid]) for rid in chunks]
