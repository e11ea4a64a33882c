"""BATCH, the scheduler's frame of rows (docs/protocol.md section 3): SGLang's own egress
frame (0.5.23 `push_generation`), so a scheduler can send the bytes it already builds.
Decoding validates the whole frame before any row is used: a frame is accepted whole or
dropped whole (section 3.3). Every decoder is built once at import."""

from __future__ import annotations

import struct
import sys
from itertools import accumulate
from typing import Annotated, Any

import msgspec

from sglang_tok.finish import Finish
from sglang_tok.protocols.model.errors import FrameError, checked_finishes
from sglang_tok.protocols.model.tags import TAG_BATCH

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("sglang-tok reads little-endian buffers with memoryview.cast")

NonNeg = Annotated[int, msgspec.Meta(ge=0)]


# --------------------------------------------------------------------------- BATCH
class BatchHeader(msgspec.Struct, array_like=True, gc=False):
    """Columns of a BATCH header; trailing columns may be missing or `[]` (absent)."""

    rids: list[str]
    finish_reasons: list[Finish | None]
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


class _LooseHeader(BatchHeader, array_like=True, gc=False):
    """A header whose finish reasons are any maps: what a frame the typed decode refused is
    read again as, to say why (`_unchecked_header`, `errors.checked_finishes`)."""

    finish_reasons: list[dict[str, Any] | None]  # type: ignore[assignment]


_any_decoder = msgspec.msgpack.Decoder()
_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(_LooseHeader)
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
            "rid": h.rids[i], "ids": ids[st[i]:st[i + 1]],
            "finish": msgspec.to_builtins(h.finish_reasons[i]),
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
    if type(h) is _LooseHeader:  # the typed decode refused a finish reason: say which
        h = BatchHeader(rids, checked_finishes(h.finish_reasons, rids), *cols[2:])
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
