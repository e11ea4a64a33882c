"""A recorded SGLang server's scheduler messages, read back as the streams the stand-in
replays, on the release that recorded them or on any other.

The plugin records (`SGLANG_TOK_RECORD=PATH`: `sglang-tok serve --record PATH`) every
message the scheduler sent the detokenizer, as it came, in the project's trace format
(`sglang_tok.tracefile`: each frame with its time), with the recording release's layout in
its metadata (`sglang_layout`; a trace without one was recorded on 0.5.23). Each message is
read by that release's field names: msgpack (0.5.15 on) by its order of fields, a pickle
(0.5.12-0.5.14) by the names its object carries, unpickled without SGLang and without
running anything (`pickles.load_record`: SGLang's classes become inert records, nothing
else but `array` loads).

Replayed, each recorded request gives the ids of each of its rows in order, how it ended,
and its output logprobs where it asked for them; the stand-in hands them to new requests in
the order the recording first saw them and builds every message with the replaying
release's own class by name (`release_message.FieldMap`), so a trace recorded on one
release replays on another. What a replay reads from a trace (`READ`), and what the
replaying release requires that neither the trace nor the stand-in gives, are refused in
one line (`replay_refusal`).
"""

from __future__ import annotations

import struct
from array import array
from pathlib import Path
from typing import Any

import msgspec

from sglang_tok.tracefile import read

from .pickles import Record, load_record
from .release_message import TAG, FieldMap, Fields, fields_of, known_fields
from .streams import ChunkLogprobs

Recording = tuple[list[list[int]], dict[str, Any] | None]
# what a replay reads of each recorded message
READ = ("rids", "output_ids", "finished_reasons")
# what it carries over when the trace has it: each row's output logprobs
LOGPROBS = ("output_token_logprobs_val", "output_top_logprobs_val", "output_top_logprobs_idx")

_META = struct.Struct(">I")
_raw_fields = msgspec.msgpack.Decoder(list[msgspec.Raw])


def _ext(code: int, data: memoryview) -> Any:
    """SGLang's `array` ext (type 1: metadata length, typecode, raw bytes) as a list of
    ids; any other ext (a tensor) as None."""
    if code != 1 or len(data) < _META.size:
        return None
    size = _META.unpack_from(data)[0]
    typecode = msgspec.msgpack.decode(data[_META.size:_META.size + size])
    out = array(typecode)
    out.frombytes(bytes(data[_META.size + size:]))
    return out.tolist()


_value = msgspec.msgpack.Decoder(ext_hook=_ext)


class Recorded(msgspec.Struct):
    """One recorded request: its ids per row, how it ended, per row its output logprobs
    (None for a row without them)."""

    chunks: list[list[int]]
    end: dict[str, Any] | None = None
    logprobs: list[ChunkLogprobs | None] | None = None


class Trace(msgspec.Struct):
    path: str
    fields: Fields  # the recording release's
    requests: list[Recorded]
    messages: int = 0  # BatchTokenIDOutput messages read
    skipped: int = 0  # frames that were none (another message, or unreadable)


# the release every trace without a layout in its metadata was recorded on (traces carry
# one since the stand-in ran on more than one release)
UNLABELLED = "0.5.23"


class ReplayRefused(ValueError):
    """A trace that cannot be replayed (one line)."""


def trace_fields(meta: dict[str, Any]) -> Fields:
    """The recording release's fields from a trace's metadata (`sglang_layout`, the
    layout as in `protocols/sglang/layouts/`); 0.5.23's where it has none."""
    layout = meta.get("sglang_layout")
    if not layout:
        return known_fields(UNLABELLED)
    try:
        return fields_of(layout)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ReplayRefused(f"the trace's sglang_layout is not a layout ({exc})") from None


def read_trace(path: str | Path) -> Trace:
    """Every recorded request of a trace, read by its release's field names."""
    trace = read(path)
    proto = trace.meta.get("protocol", "sglang")
    if proto != "sglang":
        raise ReplayRefused(f"{path}: a {proto} trace, not SGLang scheduler messages")
    fields = trace_fields(trace.meta)
    lacking = [name for name in READ if name not in fields.token_ids]
    if lacking:
        raise ReplayRefused(f"the trace {path} (recorded on SGLang {fields.release}) cannot "
                            f"be replayed: its {TAG} has no {', '.join(lacking)}")
    pickled = fields.ipc == "pickle"
    chunks: dict[str, list[list[int]]] = {}
    ends: dict[str, dict[str, Any] | None] = {}
    lps: dict[str, list[ChunkLogprobs | None]] = {}
    messages = skipped = other_shape = 0
    for frame in trace.frames:
        cols = _pickled(frame) if pickled else _msgpack(frame, fields.token_ids)
        if cols is None:
            skipped += 1
            other_shape += not pickled and _is_token_ids(frame)
            continue
        messages += 1
        rids = cols.get("rids") or []
        rows = cols.get("output_ids") or [[] for _ in rids]
        fins = cols.get("finished_reasons") or [None] * len(rids)
        for i, rid in enumerate(rids):
            if rid in ends and ends[rid] is not None:
                continue  # a rid used again: the recording keeps its first life
            ids = [int(t) for t in rows[i] or ()]
            chunks.setdefault(rid, []).append(ids)
            ends[rid] = fins[i]
            lps.setdefault(rid, []).append(_logprobs(cols, i, len(ids)))
    if not chunks and other_shape:
        raise ReplayRefused(
            f"the trace {path} holds {other_shape} {TAG} messages that are not SGLang "
            f"{fields.release}'s ({len(fields.token_ids)} fields): record it with its layout "
            "(sglang_layout in the trace's metadata)")
    requests = [Recorded(chunks[rid], ends[rid],
                         lps[rid] if any(x is not None for x in lps[rid]) else None)
                for rid in chunks]
    return Trace(str(path), fields, requests, messages, skipped)


def recordings(path: str | Path) -> list[Recording]:
    """Per recorded request, in order of its first row: its ids per row, its finish."""
    return [(r.chunks, r.end) for r in read_trace(path).requests]


def replay_refusal(trace: Trace | Fields, field_map: FieldMap) -> str | None:
    """Why a trace cannot be replayed into the release of `field_map` (one line): the fields
    that release requires that the trace lacks and the stand-in does not make."""
    fields = trace.fields if isinstance(trace, Trace) else trace
    # what a replay carries from the trace (READ, LOGPROBS) is among the stand-in's own
    # columns: a field the field_map lacks is one neither gives
    if not field_map.missing:
        return None
    return (f"a trace recorded on SGLang {fields.release} cannot be replayed into SGLang "
            f"{field_map.release}: its {TAG} requires {', '.join(field_map.missing)}, which the "
            "trace does not carry and the stand-in does not make")


# --------------------------------------------------------------------------- frames
def _is_token_ids(frame: bytes | memoryview) -> bool:
    try:
        fields = _raw_fields.decode(frame)
    except msgspec.DecodeError:
        return False
    return bool(fields) and bytes(fields[0]) == msgspec.msgpack.encode(TAG)


def _msgpack(frame: bytes | memoryview, names: tuple[str, ...]) -> dict[str, Any] | None:
    """The columns a replay reads of a msgpack BatchTokenIDOutput of these fields; None
    for any other message, or one of another shape."""
    try:
        fields = _raw_fields.decode(frame)
        if len(fields) != len(names) + 1 or bytes(fields[0]) != msgspec.msgpack.encode(TAG):
            return None
        at = dict(zip(names, fields[1:]))
        return {name: _value.decode(at[name]) for name in (*READ, *LOGPROBS) if name in at}
    except (msgspec.DecodeError, ValueError, TypeError):
        return None


def _pickled(frame: bytes | memoryview) -> dict[str, Any] | None:
    """The columns of a pickled BatchTokenIDOutput (0.5.12-0.5.14), by the names its
    object carries; None for any other message or one that does not load here."""
    try:
        obj = load_record(frame)
    except Exception:  # anything a foreign pickle can raise: the frame is not replayed
        return None
    if type(obj).__name__ != TAG or not isinstance(obj, Record):
        return None
    state = vars(obj)
    return {name: _plain(state.get(name)) for name in (*READ, *LOGPROBS)}


def _plain(value: Any) -> Any:
    if isinstance(value, array):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _logprobs(cols: dict[str, Any], i: int, n: int) -> ChunkLogprobs | None:
    """Row i's output logprobs, where the trace has one per id of the row."""
    vals = cols.get("output_token_logprobs_val")
    if not vals or i >= len(vals) or not n:
        return None
    val = vals[i]
    if not isinstance(val, list) or len(val) != n:
        return None
    tops = cols.get("output_top_logprobs_val") or []
    idx = cols.get("output_top_logprobs_idx") or []
    top_val = tops[i] if i < len(tops) and isinstance(tops[i], list) else []
    top_idx = idx[i] if i < len(idx) and isinstance(idx[i], list) else []
    if len(top_val) != n or len(top_idx) != n:
        top_val = top_idx = []
    return ChunkLogprobs([float(v) for v in val], top_val, top_idx)


__all__ = ["LOGPROBS", "READ", "Recorded", "Recording", "ReplayRefused", "Trace",
           "read_trace", "recordings", "replay_refusal", "trace_fields"]
