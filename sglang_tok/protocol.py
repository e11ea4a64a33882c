"""Wire protocol v1: every frame that crosses a socket, as msgspec structs.

The BATCH layout is SGLang's own egress frame (0.5.23 `push_generation`), so a scheduler
can send us the bytes it already builds. Decoding validates the whole frame before any row
is used: a frame is accepted whole or dropped whole (protocol section 3.3). Nothing here is
pickled; every decoder is built once at import and typed to what it decodes.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator
from itertools import accumulate, chain
from typing import Annotated, Any

import msgspec
import numpy as np

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("sglang-tok reads little-endian buffers with memoryview.cast")

TAG_RESULT = 0x01
TAG_BATCH = 0x02
TAG_ERROR = 0x03
TAG_OPEN = 0x4F
TAG_ABORT = 0x41
TAG_PING = 0x50
TAG_DELTAS = 0x44
TAG_PONG = 0x51
TAG_RESTARTED = 0x52
INPUT_TAGS = {TAG_RESULT: "result", TAG_BATCH: "batch", TAG_ERROR: "error",
              TAG_OPEN: "open", TAG_ABORT: "abort", TAG_PING: "ping"}

MALFORMED_FRAME = "malformed scheduler output frame"
SHARD_RESTARTED = "detokenizer shard restarted"
EGRESS_RESTARTED = "detokenizer egress restarted"
EGRESS = -1  # the egress's `shard` in DELTAS, COLUMNS, PONG and RESTARTED

NonNeg = Annotated[int, msgspec.Meta(ge=0)]
FinishReason = dict[str, Any]
FINISH_TYPES = frozenset(("stop", "length", "abort"))


class FrameError(Exception):
    """A frame that must be dropped whole; `rids` are those still readable from it."""

    def __init__(self, reason: str, detail: str, rids: list[str] | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.rids: list[str] = rids or []


# --------------------------------------------------------------------------- BATCH
class BatchHeader(msgspec.Struct, array_like=True, gc=False):
    """Columns of a BATCH header; trailing columns may be missing or `[]` (absent)."""

    rids: list[str]
    finish_reasons: list[FinishReason | None]
    prompt_tokens: list[NonNeg]
    tok_lens: list[NonNeg]
    cached_tokens: list[NonNeg]
    reasoning_tokens: list[NonNeg]
    output_token_logprobs_lens: list[NonNeg] = []
    input_token_logprobs_lens: list[NonNeg] = []
    output_top_logprobs_reqlens: list[NonNeg] = []
    output_top_logprobs_poslens: list[NonNeg] = []
    input_top_logprobs_reqlens: list[NonNeg] = []
    input_top_logprobs_poslens: list[NonNeg] = []
    output_token_ids_logprobs_reqlens: list[NonNeg] = []
    output_token_ids_logprobs_poslens: list[NonNeg] = []
    input_token_ids_logprobs_reqlens: list[NonNeg] = []
    input_token_ids_logprobs_poslens: list[NonNeg] = []
    output_hidden_states_reqlens: list[NonNeg] = []
    output_hidden_states_poslens: list[NonNeg] = []
    weight_versions: list[Any] = []
    image_tokens: list[Any] = []
    audio_tokens: list[Any] = []
    video_tokens: list[Any] = []
    decode_latencies: list[Any] = []
    ended_outside_stream: list[Any] = []


HEADER_FIELDS: tuple[str, ...] = BatchHeader.__struct_fields__
REQUIRED_COLUMNS = 6
TRAILING_FIRST = 18
# (family, first column index, kind); kind: flat pair, ragged pair, or hidden states.
FAMILIES: tuple[tuple[str, int, str], ...] = (
    ("output_logprobs", 6, "flat"),
    ("input_logprobs", 7, "flat"),
    ("output_top", 8, "ragged"),
    ("input_top", 10, "ragged"),
    ("output_token_ids", 12, "ragged"),
    ("input_token_ids", 14, "ragged"),
    ("output_hidden", 16, "hidden"),
)

_header_decoder = msgspec.msgpack.Decoder(BatchHeader)
_any_decoder = msgspec.msgpack.Decoder()
_encoder = msgspec.msgpack.Encoder()
_U32 = struct.Struct("<I")


class Section(msgspec.Struct, gc=False):
    """One typed run of the data buffer; row r owns elements row_starts[r]:row_starts[r+1]."""

    start: int  # byte offset in the data buffer
    size: int  # bytes per element
    fmt: str  # memoryview.cast format
    row_starts: list[int]


class Family(msgspec.Struct, gc=False):
    """An extras family: its values section, ids section (not for hidden), and positions."""

    name: str
    kind: str
    values: Section
    ids: Section | None
    # ragged only: the k of each position, and where each row's positions start
    poslens: list[int]
    pos_starts: list[int]


def _starts(counts: list[int]) -> list[int]:
    return [0, *accumulate(counts)]


class Batch:
    """A validated BATCH frame: its header and typed views of its data buffer."""

    __slots__ = ("header", "data", "total_ids", "layout", "_tokens", "_families")

    def __init__(self, header: BatchHeader, data: memoryview, total_ids: int,
                 layout: list[tuple[str, int, str, int]]) -> None:
        self.header = header
        self.data = data
        self.total_ids = total_ids
        self.layout = layout  # (family, first column, kind, byte offset) of each present one
        self._tokens: Section | None = None
        self._families: list[Family] | None = None

    @property
    def tokens(self) -> Section:
        """Where each row's ids are; built on first use (the egress never asks)."""
        if self._tokens is None:
            self._tokens = Section(0, 8, "q", _starts(self.header.tok_lens))
        return self._tokens

    @property
    def families(self) -> list[Family]:
        if self._families is None:
            self._families = [_family(self.header, *entry) for entry in self.layout]
        return self._families

    @property
    def rids(self) -> list[str]:
        return self.header.rids

    def __len__(self) -> int:
        return len(self.header.rids)

    def token_ids(self) -> list[int]:
        """All rows' ids, flat, in row order (slice with `tokens.row_starts`)."""
        return _read(self.data, self.tokens)

    def family(self, name: str) -> Family | None:
        for fam in self.families:
            if fam.name == name:
                return fam
        return None

    def flat_pairs(self, fam: Family) -> tuple[list[float], list[int]]:
        assert fam.ids is not None
        return _read(self.data, fam.values), _read(self.data, fam.ids)

    def row(self, i: int) -> dict[str, Any]:
        """One row as plain data (cold path: tests, tools, the manifest check)."""
        h = self.header
        ids = self.token_ids()
        st = self.tokens.row_starts
        out: dict[str, Any] = {
            "rid": h.rids[i], "ids": ids[st[i]:st[i + 1]], "finish": h.finish_reasons[i],
            "prompt_tokens": h.prompt_tokens[i], "cached_tokens": h.cached_tokens[i],
            "reasoning_tokens": h.reasoning_tokens[i],
        }
        for fam in self.families:
            out[fam.name] = self.row_family(fam, i)
        for col in HEADER_FIELDS[TRAILING_FIRST:]:
            vals = getattr(h, col)
            if vals:
                out[col] = vals[i]
        return out

    def row_family(self, fam: Family, i: int) -> Any:
        """Row i of a family: flat -> [[v, id]]; ragged -> [[[v, id], ...] or None]."""
        vals = _read(self.data, fam.values)
        ids = _read(self.data, fam.ids) if fam.ids is not None else None
        a, b = fam.values.row_starts[i], fam.values.row_starts[i + 1]
        if fam.kind == "flat":
            assert ids is not None
            return [[vals[j], ids[j]] for j in range(a, b)]
        positions: list[Any] = []
        j = a
        for p in range(fam.pos_starts[i], fam.pos_starts[i + 1]):
            k = fam.poslens[p]
            if k == 0:
                positions.append(None)
            elif ids is None:
                positions.append(vals[j:j + k])
            else:
                positions.append([[vals[q], ids[q]] for q in range(j, j + k)])
            j += k
        return positions


def _read(data: memoryview, sec: Section) -> list[Any]:
    end = sec.start + sec.size * sec.row_starts[-1]
    view: memoryview = data[sec.start:end]
    return view.cast(sec.fmt).tolist()  # type: ignore[call-overload]


def _readable_rids(raw: bytes | memoryview) -> list[str]:
    """Rids of a header that failed typed validation, where column 0 is still readable."""
    try:
        cols = _any_decoder.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return []
    if not isinstance(cols, list) or not cols or not isinstance(cols[0], list):
        return []
    return [r for r in cols[0] if isinstance(r, str) and r]


def _family(h: BatchHeader, name: str, idx: int, kind: str, pos: int) -> Family:
    lens: list[int] = getattr(h, HEADER_FIELDS[idx])
    if kind == "flat":
        starts, poslens, pos_starts = _starts(lens), [], []
    else:
        poslens = getattr(h, HEADER_FIELDS[idx + 1])
        pos_starts = _starts(lens)
        value_starts = _starts(poslens)  # values before each position
        starts = list(map(value_starts.__getitem__, pos_starts))
    total = starts[-1]
    ids_sec = Section(pos + 4 * total, 4, "i", starts) if kind != "hidden" else None
    return Family(name, kind, Section(pos, 4, "f", starts), ids_sec, poslens, pos_starts)


_limited_decoders: dict[int, msgspec.msgpack.Decoder[Any]] = {}


def _header_decoder_for(max_rid_len: int) -> msgspec.msgpack.Decoder[Any]:
    """A header decoder that also checks every rid is non-empty and within the limit, so
    that a good frame pays for those checks inside msgspec's own loop."""
    dec = _limited_decoders.get(max_rid_len)
    if dec is None:
        meta = msgspec.Meta(min_length=1, max_length=max_rid_len) if max_rid_len else \
            msgspec.Meta(min_length=1)
        limited = msgspec.defstruct(
            "LimitedBatchHeader", [("rids", list[Annotated[str, meta]])], bases=(BatchHeader,),
            array_like=True, gc=False)
        dec = _limited_decoders[max_rid_len] = msgspec.msgpack.Decoder(limited)
    return dec


def decode_batch(frame: bytes | memoryview, max_rid_len: int = 0, max_row_ids: int = 0) -> Batch:
    """Parse and fully validate a BATCH frame (tag byte included); raise FrameError.

    Every check is a whole-column operation (msgspec's typed decode, `sum`, `max`,
    `count`); row positions in the data buffer are computed only when a row is read. What
    runs only for a frame that fails a check, or carries what most do not (endings,
    logprobs), is in functions of their own: the steady-state frame makes no call for them.
    """
    mv = memoryview(frame)
    if len(mv) < 5 or mv[0] != TAG_BATCH:
        raise FrameError("truncated", "BATCH frame shorter than its length prefix")
    hlen = _U32.unpack_from(mv, 1)[0]
    if 5 + hlen > len(mv) or hlen == 0:
        raise FrameError("truncated", f"header length {hlen} exceeds frame of {len(mv)} bytes")
    raw = mv[5:5 + hlen]
    try:
        h = _header_decoder_for(max_rid_len).decode(raw)
    except (ValueError, RecursionError):  # msgspec errors, bad UTF-8: say which
        h = _unchecked_header(raw, max_rid_len)
    rids = h.rids
    n = len(rids)
    cols = msgspec.structs.astuple(h)  # one C call; then lengths as one list
    sizes = list(map(len, cols))
    if sizes[:REQUIRED_COLUMNS].count(n) != REQUIRED_COLUMNS:
        _check_lengths(HEADER_FIELDS[1:REQUIRED_COLUMNS], sizes[1:REQUIRED_COLUMNS], n, rids,
                       False)
    fins = h.finish_reasons
    ending = n - fins.count(None)  # C-speed scans; most rows of most frames are still running
    if ending:
        _check_finish(fins, ending, rids)
    total_ids = sum(h.tok_lens)
    # no row can exceed the limit when all of them together do not (the usual frame)
    if max_row_ids and total_ids > max_row_ids and max(h.tok_lens) > max_row_ids:
        raise FrameError("limit_row_ids", f"row with more than --max-row-ids {max_row_ids} ids",
                         rids)
    trailing = sizes[TRAILING_FIRST:]
    if trailing.count(0) + trailing.count(n) != len(trailing):
        _check_lengths(HEADER_FIELDS[TRAILING_FIRST:], trailing, n, rids, True)
    pos = total_ids * 8
    layout: list[tuple[str, int, str, int]] = []
    if any(sizes[REQUIRED_COLUMNS:TRAILING_FIRST]):  # some logprob family is present
        pos = _family_layout(cols, n, pos, layout, rids)
    data = mv[5 + hlen:]
    if len(data) != pos:
        raise FrameError("data_length", f"data buffer is {len(data)} bytes, header implies {pos}",
                         rids)
    return Batch(h, data, total_ids, layout)


def _unchecked_header(raw: memoryview, max_rid_len: int) -> BatchHeader:
    """The header of a frame the limited decoder refused, decoded again without the rid
    checks, so that the error says which check failed (or that it is no header at all)."""
    try:
        h = _header_decoder.decode(raw)
    except (ValueError, RecursionError) as exc:
        raise FrameError("header", str(exc)[:200], _readable_rids(raw)) from None
    rids = h.rids
    if not all(rids):
        raise FrameError("header", "empty rid", [r for r in rids if r])
    if max_rid_len and rids and max(map(len, rids)) > max_rid_len:
        raise FrameError("limit_rid_length", f"rid longer than --max-rid-length {max_rid_len}",
                         [r for r in rids if len(r) <= max_rid_len])
    return h


def _length_error(col: str, got: int, n: int, rids: list[str]) -> FrameError:
    return FrameError("columns", f"column {col} has {got} entries, expected {n}", rids)


def _check_lengths(fields: tuple[str, ...], sizes: list[int], n: int, rids: list[str],
                   empty_ok: bool) -> None:
    """Raise for the first column whose length is not the row count (an empty one is an
    absent column where `empty_ok`); the caller's one `count` found that one may be."""
    for col, got in zip(fields, sizes):
        if got != n and (got or not empty_ok):
            raise _length_error(col, got, n, rids)


def _check_finish(fins: list[FinishReason | None], ending: int, rids: list[str]) -> None:
    """Every finish reason present is a map of a known type (a frame with none, the usual
    one, does not come here)."""
    present = list(filter(None, fins))  # an empty map is falsy: left out here
    for fin in present:
        kind = fin.get("type")  # any msgpack value: a list or map is unhashable
        if not isinstance(kind, str) or kind not in FINISH_TYPES:
            raise FrameError("finish", f"unknown finish reason {fin!r:.80}", rids)
    if len(present) != ending:
        raise FrameError("finish", "empty finish reason", rids)


def _family_layout(cols: tuple[Any, ...], n: int, pos: int,
                   layout: list[tuple[str, int, str, int]], rids: list[str]) -> int:
    """Append where each present logprob family starts in the data buffer (from `pos`, after
    the ids) to `layout`, checking its columns; return where the buffer must end."""
    for name, idx, kind in FAMILIES:
        lens: list[int] = cols[idx]
        if not lens:
            if kind != "flat" and cols[idx + 1]:
                raise FrameError("ragged", f"{HEADER_FIELDS[idx + 1]} without reqlens", rids)
            continue
        if len(lens) != n:
            raise _length_error(HEADER_FIELDS[idx], len(lens), n, rids)
        if kind == "flat":
            count = sum(lens)
        else:
            poslens = cols[idx + 1]
            positions = sum(lens)
            if positions != len(poslens):
                raise FrameError("ragged", f"sum({HEADER_FIELDS[idx]})={positions} but "
                                 f"{len(poslens)} poslens", rids)
            count = sum(poslens)
        layout.append((name, idx, kind, pos))
        pos += 4 * count * (1 if kind == "hidden" else 2)
    return pos


def _frame(columns: list[Any], data: bytes) -> bytes:
    head = _encoder.encode(columns)
    return b"".join((b"\x02", _U32.pack(len(head)), head, data))


def encode_batch(rows: list[dict[str, Any]], ncols: int = REQUIRED_COLUMNS) -> bytes:
    """Build a BATCH frame from plain rows (the shape `Batch.row` returns).

    Families present in any row are written for every row. Used by tests and the trace
    synthesiser; a real scheduler builds these bytes itself.
    """
    n = len(rows)
    cols: list[Any] = [[r["rid"] for r in rows], [r.get("finish") for r in rows],
                       [r.get("prompt_tokens", 0) for r in rows],
                       [len(r["ids"]) for r in rows],
                       [r.get("cached_tokens", 0) for r in rows],
                       [r.get("reasoning_tokens", 0) for r in rows]]
    cols += [[] for _ in HEADER_FIELDS[REQUIRED_COLUMNS:]]
    parts = [struct.pack(f"<{sum(cols[3])}q", *[i for r in rows for i in r["ids"]])]
    for name, idx, kind in FAMILIES:
        if not any(name in r for r in rows):
            continue
        per_row = [r.get(name) or [] for r in rows]
        if kind == "flat":
            cols[idx] = [len(p) for p in per_row]
            pairs = [pair for p in per_row for pair in p]
        else:
            cols[idx] = [len(p) for p in per_row]
            cols[idx + 1] = [len(pos or []) for p in per_row for pos in p]
            pairs = [pair for p in per_row for pos in p for pair in (pos or [])]
        if kind == "hidden":
            parts.append(struct.pack(f"<{len(pairs)}f", *pairs))
        else:
            parts.append(struct.pack(f"<{len(pairs)}f", *[v for v, _ in pairs]))
            parts.append(struct.pack(f"<{len(pairs)}i", *[t for _, t in pairs]))
        ncols = max(ncols, idx + (1 if kind == "flat" else 2))
    for c, col in enumerate(HEADER_FIELDS[TRAILING_FIRST:], TRAILING_FIRST):
        if any(col in r for r in rows):
            cols[c] = [r.get(col) for r in rows]
            ncols = max(ncols, c + 1)
    assert all(len(cols[c]) == n for c in range(REQUIRED_COLUMNS))
    return _frame(cols[:ncols], b"".join(parts))


# --------------------------------------------------------------------------- control frames
class Result(msgspec.Struct, array_like=True, gc=False):
    rid: str
    payload: bytes


class Error(msgspec.Struct, array_like=True, gc=False):
    rid: str
    message: str


class Open(msgspec.Struct, gc=False):
    """Per-request decode options; unknown keys are ignored so fields can be appended."""

    rid: str
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    prompt_ids: list[int] = []
    stop: list[str] = []
    include_stop_str_in_output: bool = False
    stream: bool = True
    continuous_usage: bool = False
    logprob_text: bool = False
    attribution: bool = False
    # section 8: per-request parsers and min_tokens
    reasoning_parser: str = ""
    # None (absent): the reasoning parser's own default (True for deepseek-r1, as SGLang)
    reasoning_started: bool | None = None
    tool_parser: str = ""
    min_tokens: int = 0
    # section 8: the request's OpenAI tool definitions (bounded by
    # --max-tools-bytes) and how calls stream: "incremental" or "whole"
    tools: list[dict[str, Any]] = []
    tool_stream: str = "incremental"


DEFAULT_OPEN_FIELDS = Open("")


class Abort(msgspec.Struct, gc=False):
    rids: list[str]


class Ping(msgspec.Struct, gc=False):
    nonce: int


class Pong(msgspec.Struct, gc=False):
    nonce: int
    shard: int


class Usage(msgspec.Struct, gc=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    reasoning_tokens: int


class ToolCallDelta(msgspec.Struct, omit_defaults=True, gc=False):
    """One fragment of one tool call (protocol section 8): `name` on a call's first
    fragment; a frontend concatenates `arguments` per `index`. On a call's last delta in
    incremental mode, `malformed`: the call turned out not to parse (its text came back as
    content; drop the call), or `cut`: the output ended inside it (it stands as sent).
    `id`, on the first fragment only: the call id the model wrote (kimi_k2's
    `functions.NAME:IDX`), for OpenAI's `tool_calls[].id`; omitted when the format has none."""

    index: int
    name: str | None = None
    arguments: str = ""
    malformed: bool = False
    cut: bool = False
    id: str | None = None


class Delta(msgspec.Struct, omit_defaults=True, gc=False):
    """One output event of one request; default-valued keys stay off the wire."""

    rid: str
    text: str = ""
    ids: list[int] = []
    logprobs: list[Any] | None = None
    top_logprobs: list[Any] | None = None
    token_ids_logprobs: list[Any] | None = None
    token_texts: list[str] | None = None
    top_texts: list[Any] | None = None
    attributions: list[tuple[int, int, int]] | None = None
    finish: dict[str, Any] | None = None
    usage: Usage | None = None
    error: str | None = None
    result: bytes | None = None
    # section 8 (a parser on): reasoning text and tool-call fragments. Whether the request
    # ended with tool calls is a key of the last delta's `finish` (`"tool_calls": true`):
    # a 16th field would turn this map's fixmap header into map16 and change the bytes of
    # every existing delta, so Delta stays at 15 fields.
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] | None = None


def terminal(rid: str, error: str | None, usage: Usage) -> Delta:
    """A request's last delta when the service, not the scheduler, ends it."""
    return Delta(rid, finish={"type": "abort"}, error=error, usage=usage)


class Deltas(msgspec.Struct, gc=False):
    shard: int
    seq: int
    deltas: list[Delta]


class Restarted(msgspec.Struct, gc=False):
    """A replaced process's first output message (protocol section 5.3): its `seq` starts
    again from 0, and after the egress's, a frontend ends every request in flight."""

    shard: int  # as in DELTAS: -1 for the egress
    pid: int


_decoders: dict[int, msgspec.msgpack.Decoder[Any]] = {
    TAG_RESULT: msgspec.msgpack.Decoder(Result),
    TAG_ERROR: msgspec.msgpack.Decoder(Error),
    TAG_OPEN: msgspec.msgpack.Decoder(Open),
    TAG_ABORT: msgspec.msgpack.Decoder(Abort),
    TAG_PING: msgspec.msgpack.Decoder(Ping),
}
Control = Result | Error | Open | Abort | Ping


def decode_control(frame: bytes | memoryview) -> Control:
    """Decode a non-BATCH input frame; raise FrameError naming the rids it could read."""
    if not frame:
        raise FrameError("empty", "zero-length frame")
    tag = frame[0]
    dec = _decoders.get(tag)
    if dec is None:
        raise FrameError("unknown_tag", f"unknown tag 0x{tag:02x}")
    body = memoryview(frame)[1:]
    try:
        msg = dec.decode(body)
    except (ValueError, RecursionError) as exc:  # msgspec errors, bad UTF-8
        raise FrameError("body", f"{INPUT_TAGS[tag]}: {str(exc)[:200]}",
                         _body_rids(body)) from None
    if isinstance(msg, (Result, Error, Open)) and not msg.rid:
        raise FrameError("body", f"{INPUT_TAGS[tag]}: empty rid")
    if isinstance(msg, Abort) and not all(msg.rids):
        raise FrameError("body", "abort: empty rid", [r for r in msg.rids if r])
    return msg


def _body_rids(body: memoryview) -> list[str]:
    try:
        obj = _any_decoder.decode(body)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return []
    cand: Any = None
    if isinstance(obj, list) and obj:
        cand = [obj[0]]
    elif isinstance(obj, dict):
        cand = obj.get("rids") if "rids" in obj else [obj.get("rid")]
    if not isinstance(cand, list):
        return []
    return [r for r in cand if isinstance(r, str) and r]


def encode_control(msg: Control) -> bytes:
    tag = {Result: TAG_RESULT, Error: TAG_ERROR, Open: TAG_OPEN, Abort: TAG_ABORT,
           Ping: TAG_PING}[type(msg)]
    return bytes((tag,)) + _encoder.encode(msg)


def encode_deltas(msg: Deltas) -> bytes:
    return b"\x44" + _encoder.encode(msg)


def encode_pong(msg: Pong) -> bytes:
    return b"\x51" + _encoder.encode(msg)


def encode_restarted(msg: Restarted) -> bytes:
    return b"\x52" + _encoder.encode(msg)


# --------------------------------------------------------------------------- COLUMNS
# The columnar output frame (protocol section 5.2): one message of columns, laid out like
# SGLang's own `BatchStrOutput`, so that neither the shard's encoder nor the frontend's
# decoder builds a map per row. Rows are deltas; a sparse column holds (row, value) pairs
# for the few rows that carry that field, in row order.
TAG_COLUMNS = 0x43
OUTPUT_FORMATS = ("deltas", "columnar", "packed")
Attribution = tuple[int, int, int]


class _Sparse(msgspec.Struct, kw_only=True, gc=False):
    """The sparse columns of COLUMNS and PACKED (sections 5.2, 5.4), declared once for both:
    keyword-only, so that msgspec lays them after each format's own dense columns."""

    finish: list[tuple[int, FinishReason]] = []
    usage: list[tuple[int, Usage]] = []
    error: list[tuple[int, str]] = []
    result: list[tuple[int, bytes]] = []
    logprobs: list[tuple[int, list[Any]]] = []
    top_logprobs: list[tuple[int, list[Any]]] = []
    token_ids_logprobs: list[tuple[int, list[Any]]] = []
    token_texts: list[tuple[int, list[str]]] = []
    top_texts: list[tuple[int, list[Any]]] = []
    attributions: list[tuple[int, list[Attribution]]] = []
    reasoning: list[tuple[int, str]] = []
    tool_calls: list[tuple[int, list[ToolCallDelta]]] = []

    def _fill(self, out: list[Delta]) -> list[Delta]:
        """Set each sparse value on its row's Delta (the dense fields are set already)."""
        for name in SPARSE_COLUMNS:
            for r, val in getattr(self, name):
                setattr(out[r], name, val)
        return out


class Columns(_Sparse, array_like=True, omit_defaults=True, gc=False):
    """One output message of many deltas; row r is the delta of `rids[r]`.

    Row r's ids are `ids[s[r]:s[r + 1]]` with `s = starts()`. Trailing sparse columns that
    are empty stay off the wire (`encode_columns`); decoding fills them with `[]`.
    """

    shard: int
    seq: int
    rids: list[str]
    texts: list[str]
    id_lens: list[int]
    ids: list[int]

    def __len__(self) -> int:
        return len(self.rids)

    def starts(self) -> list[int]:
        return [0, *accumulate(self.id_lens)]

    def rows(self) -> Iterator[tuple[str, str, list[int]]]:
        """(rid, text, ids) per row, built at C speed (no per-row Python frame)."""
        if self.id_lens.count(1) == len(self.rids):  # one id per row: no slice objects
            return zip(self.rids, self.texts, map(list, zip(self.ids)))
        st = self.starts()
        return zip(self.rids, self.texts, map(self.ids.__getitem__, map(slice, st, st[1:])))

    def last_rows(self) -> list[int]:
        """Rows that are their request's last delta (they carry a finish)."""
        return [r for r, _ in self.finish]

    @property
    def deltas(self) -> list[Delta]:
        """Every row as a Delta, equal to what a DELTAS frame would carry: a client written
        for DELTAS reads COLUMNS unchanged (cold path: a struct per row)."""
        return self._fill([Delta(rid, text, ids) for rid, text, ids in self.rows()])


DENSE_COLUMNS = 6
SPARSE_COLUMNS: tuple[str, ...] = _Sparse.__struct_fields__
# Delta fields whose default is None (a row has the key iff the value is not None), and
# the parser fields (section 8), whose defaults are "" and None: a row has the key iff the
# value is truthy, as with omit_defaults in DELTAS
_SPARSE_NONE = SPARSE_COLUMNS[:10]
_SPARSE_TRUTHY = SPARSE_COLUMNS[10:]


class ColumnsOut:
    """A shard's output message under construction, column by column.

    `append` takes a Delta (cold paths: ends, errors, features); the shard's hot loop
    appends straight to the dense columns instead.
    """

    __slots__ = ("rids", "texts", "id_lens", "ids", "sparse")

    def __init__(self) -> None:
        self.rids: list[str] = []
        self.texts: list[str] = []
        self.id_lens: list[int] = []
        self.ids: list[int] = []
        self.sparse: dict[str, list[tuple[int, Any]]] = {}

    def __len__(self) -> int:
        return len(self.rids)

    def append(self, d: Delta) -> None:
        row = len(self.rids)
        self.rids.append(d.rid)
        self.texts.append(d.text)
        self.id_lens.append(len(d.ids))
        self.ids += d.ids
        self._sparse(d, row)

    def _sparse(self, d: Delta, row: int) -> None:
        for name in _SPARSE_NONE:
            val = getattr(d, name)
            if val is not None:
                self.sparse.setdefault(name, []).append((row, val))
        for name in _SPARSE_TRUTHY:
            val = getattr(d, name)
            if val:
                self.sparse.setdefault(name, []).append((row, val))

    def add_sparse(self, name: str, row: int, val: Any) -> None:
        self.sparse.setdefault(name, []).append((row, val))

    # the sink's interface (DeltasOut has the same): where a message's rows go, whatever
    # the format; no caller tests which sink it holds
    def put(self, row: int, name: str, value: Any) -> None:
        """A row's field beside its text (a sparse column's entry)."""
        self.sparse.setdefault(name, []).append((row, value))

    def settle(self, name: str) -> None:
        """A sparse column whose entries were put out of row order, in row order again."""
        col = self.sparse.get(name)
        if col:
            col.sort(key=_first_of)

    def add_plain(self, rids: list[str], decoded: Any, counts: list[int] | None,
                  sent: list[int], rows: Any, families: list[Any], fams: Any) -> None:
        """The array path's plain rows: their texts as the decoder made them, their ids
        as they came, and their logprob values as sparse columns (only the rows that
        carry values cost a Python step). `decoded`, `rows`, `fams`: the shard's
        `Decoded`, `PlainRows` and message families."""
        base = len(self.rids)
        self.rids += rids
        self.texts += decoded.texts()
        self.id_lens += [1] * len(sent) if counts is None else counts
        self.ids += sent
        if families:
            read = fams.get()
            at = read.carrying[rows.rows].nonzero()[0]
            outs, carrying = (at + base).tolist(), rows.rows[at].tolist()
            for field, reader in read.readers.items():
                col = [(j, v) for j, v in zip(outs, map(reader.row, carrying)) if v is not None]
                if col:
                    self.sparse.setdefault(field, []).extend(col)

    def build(self, shard: int, seq: int) -> Columns:
        return Columns(shard, seq, self.rids, self.texts, self.id_lens, self.ids,
                       **self.sparse)


class DeltasOut(list[Delta]):
    """DELTAS' sink: the message's Deltas themselves, with the sink's interface."""

    __slots__ = ()

    def put(self, row: int, name: str, value: Any) -> None:
        setattr(self[row], name, value)

    def settle(self, name: str) -> None:
        pass  # a Delta's fields have no order to keep

    def add_plain(self, rids: list[str], decoded: Any, counts: list[int] | None,
                  sent: list[int], rows: Any, families: list[Any], fams: Any) -> None:
        if counts is None:
            row_ids = [[i] for i in sent]
        else:
            cuts = [0, *accumulate(counts)]
            row_ids = [sent[a:b] for a, b in zip(cuts, cuts[1:])]
        deltas = list(map(Delta, rids, decoded.texts(), row_ids))
        if families:  # only the rows that carry logprob values cost a Python step
            msg_rows = rows.rows
            at = fams.get().carrying[msg_rows].nonzero()[0]
            for j, row in zip(at.tolist(), msg_rows[at].tolist()):
                d = deltas[j]
                d.logprobs, d.top_logprobs, d.token_ids_logprobs = fams.extras(row)
        self += deltas


def _first_of(entry: tuple[int, Any]) -> int:
    return entry[0]


Sink = DeltasOut | ColumnsOut  # where a shard's handlers put the deltas of one message


def columns_of(shard: int, seq: int, deltas: list[Delta]) -> Columns:
    out = ColumnsOut()
    for d in deltas:
        out.append(d)
    return out.build(shard, seq)


def encode_columns(msg: Columns) -> bytes:
    cols = msgspec.structs.astuple(msg)
    end = len(cols)
    while end > DENSE_COLUMNS and not cols[end - 1]:
        end -= 1
    return b"\x43" + _encoder.encode(cols[:end])


# --------------------------------------------------------------------------- PACKED
# COLUMNS with its per-row strings and numbers as buffers (protocol section 5.4): a shard's
# array path has every row's text as one UTF-8 buffer already, and ids as one int64 array,
# so it sends them as they are, and a frontend cuts them with C-speed slicing.
TAG_PACKED = 0x4B
_U32S = "<u4"


class _SparseFamilies(_Sparse, kw_only=True, gc=False):
    # logprobs of the array path's rows as numbers (sglang_tok/logprob_rows.py: name, rows,
    # lens, poslens, values, ids); rows of other paths use the sparse list columns
    families: list[tuple[str, bytes, bytes, bytes, bytes, bytes]] = []


class Packed(_SparseFamilies, array_like=True, omit_defaults=True, gc=False):
    """One output message of many deltas; row r is the delta of `rids[r]`.

    Row r's text is the UTF-8 `text` decoded, from character sum(text_lens[:r]), for
    text_lens[r] characters (code points); its ids are the little-endian int64 `ids` cut by
    `id_lens` (u32 each), or one id per row when `id_lens` is empty. The sparse columns are
    COLUMNS' (section 5.2), row numbers and all.
    """

    shard: int
    seq: int
    rids: list[str]
    text: bytes
    text_lens: bytes
    id_lens: bytes
    ids: bytes

    def __len__(self) -> int:
        return len(self.rids)

    def texts(self) -> list[str]:
        """Every row's text: one decode, then slices (C speed, no per-row frame)."""
        text = self.text.decode("utf-8")
        lens = np.frombuffer(self.text_lens, _U32S)
        if not len(lens):
            return []
        ends = np.cumsum(lens).tolist()
        return list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))

    def id_rows(self) -> list[list[int]]:
        ids = np.frombuffer(self.ids, "<i8").tolist()
        if not self.id_lens:
            return list(map(list, zip(ids)))
        ends = np.cumsum(np.frombuffer(self.id_lens, _U32S)).tolist()
        return list(map(ids.__getitem__, map(slice, [0, *ends[:-1]], ends)))

    @property
    def deltas(self) -> list[Delta]:
        out = self._fill(list(map(Delta, self.rids, self.texts(), self.id_rows())))
        if self.families:
            from .logprob_rows import FIELDS, RowFamilies

            fams = RowFamilies(self.families, len(out), lists=True)
            for r in np.flatnonzero(fams.carrying).tolist():
                for field in FIELDS.values():
                    val = fams.row(field, r)
                    if val is not None:
                        setattr(out[r], field, val)
        return out


class PackedOut(ColumnsOut):
    """A PACKED message under construction: runs of rows whose text is one UTF-8 buffer
    (the array path) or single Deltas (every other path), kept in order."""

    __slots__ = ("parts", "char_lens", "id_arrays", "multi", "families", "_own_tail")

    def __init__(self) -> None:
        super().__init__()
        self.families: list[tuple[str, bytes, bytes, bytes, bytes, bytes]] = []
        self.parts: list[bytes] = []
        self.char_lens: list[Any] = []  # u32 arrays or lists
        self.id_arrays: list[Any] = []  # int64 arrays or lists
        self.multi = False  # some row has other than one id
        self._own_tail = False  # the last runs are lists `append` made: it extends them

    def append(self, d: Delta) -> None:
        """One delta of another path: consecutive ones share one run (a run per delta made
        building the message cost a conversion call per delta)."""
        row = len(self.rids)
        self.rids.append(d.rid)
        self.parts.append(d.text.encode())
        if self._own_tail:
            self.char_lens[-1].append(len(d.text))
            self.id_arrays[-1].extend(d.ids)
        else:
            self.char_lens.append([len(d.text)])
            self.id_arrays.append(list(d.ids))
            self._own_tail = True
        self.id_lens.append(len(d.ids))
        if len(d.ids) != 1:
            self.multi = True
        self._sparse(d, row)

    def add_plain(self, rids: list[str], decoded: Any, counts: list[int] | None,
                  sent: list[int], rows: Any, families: list[Any], fams: Any) -> None:
        """The array path's plain rows as one UTF-8 buffer and int64 array; their logprob
        families pass through as they came (renumbered when not every row is here)."""
        base = len(self.rids)
        data, char_lens = decoded.packed()
        self.add_rows(rids, data, char_lens, [1] * len(sent) if counts is None else counts,
                      sent)
        if families:
            if base == 0 and rows.every:  # the message's rows, numbered as they are
                self.families += families
            else:
                from .logprob_rows import shift  # the client reads no array path's rows

                self.families += [shift(fam, rows.rows, base) for fam in families]

    def add_rows(self, rids: list[str], text: bytes, char_lens: Any, id_lens: Any,
                 ids: Any) -> None:
        """Rows of the array path: their texts as one UTF-8 buffer and character counts,
        their ids as one int64 array and per-row counts (numpy arrays)."""
        self.rids += rids
        self.parts.append(text)
        self.char_lens.append(char_lens)
        self.id_lens += id_lens if isinstance(id_lens, list) else id_lens.tolist()
        self.id_arrays.append(ids)
        self._own_tail = False
        if len(ids) != len(rids):
            self.multi = True

    def build_packed(self, shard: int, seq: int) -> Packed:
        lens = _u32(self.char_lens)
        ids = _i64(self.id_arrays)
        id_lens = array("I", self.id_lens).tobytes() if self.multi else b""
        return Packed(shard, seq, self.rids, b"".join(self.parts), lens, id_lens, ids,
                      **self.sparse, families=self.families)


def _u32(parts: list[Any]) -> bytes:
    """Little-endian u32 of runs that are lists (the small-message path, single Deltas) or
    numpy arrays (the array path), without a numpy call for a message of lists."""
    if all(type(p) is list for p in parts):
        return array("I", chain.from_iterable(parts)).tobytes()
    return np.concatenate([np.asarray(p, np.uint32) for p in parts]).astype(_U32S).tobytes()


def _i64(parts: list[Any]) -> bytes:
    if all(type(p) is list for p in parts):
        return array("q", chain.from_iterable(parts)).tobytes()
    return np.concatenate([np.asarray(p, np.int64) for p in parts]).astype("<i8").tobytes()


def encode_packed(msg: Packed) -> bytes:
    return b"\x4b" + _encoder.encode(msg)


def encode_output(fmt: str, shard: int, seq: int, deltas: list[Delta] | ColumnsOut) -> bytes:
    """One output message in the configured format (`--output-format`)."""
    if isinstance(deltas, PackedOut):
        return encode_packed(deltas.build_packed(shard, seq))
    if isinstance(deltas, ColumnsOut):
        return encode_columns(deltas.build(shard, seq))
    if fmt == "columnar":
        return encode_columns(columns_of(shard, seq, deltas))
    if fmt == "packed":
        out = PackedOut()
        for d in deltas:
            out.append(d)
        return encode_packed(out.build_packed(shard, seq))
    return encode_deltas(Deltas(shard, seq, deltas))


def output_sink(fmt: str) -> Sink:
    """What a shard's handlers append a message's deltas to, for `--output-format`."""
    if fmt == "packed":
        return PackedOut()
    return ColumnsOut() if fmt == "columnar" else DeltasOut()


_deltas_decoder = msgspec.msgpack.Decoder(Deltas)
_pong_decoder = msgspec.msgpack.Decoder(Pong)
_columns_decoder = msgspec.msgpack.Decoder(Columns)
_restarted_decoder = msgspec.msgpack.Decoder(Restarted)
_packed_decoder = msgspec.msgpack.Decoder(Packed)


def decode_output(frame: bytes | memoryview) -> Deltas | Pong | Columns | Packed | Restarted:
    """Decode a frame the service sends to the frontend: DELTAS, COLUMNS, PACKED, PONG or
    RESTARTED."""
    tag = frame[0]
    if tag == TAG_PACKED:
        return _packed_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_COLUMNS:
        return _columns_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_DELTAS:
        return _deltas_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_PONG:
        return _pong_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_RESTARTED:
        return _restarted_decoder.decode(memoryview(frame)[1:])
    raise FrameError("unknown_tag", f"unknown output tag 0x{tag:02x}")
