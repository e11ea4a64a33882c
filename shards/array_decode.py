"""Whole-array decoding of plain byte-level rows: one message's rows in a fixed number of numpy
calls, whatever their count.

For byte-level BPE, decode(ids) is lossy UTF-8 of the concatenated per-id bytes, so a row's
text is its slot's pending bytes plus its ids' bytes, cut before any incomplete character at
the end (held as the slot's new pending bytes, as `codecs.utf_8_decode(..., final=False)`
holds it). Done per row that costs a Python step each; done here the rows are gathered
into one buffer, the held tails found with vectorised byte tests, and every row's complete
part decoded by one `bytes.decode`. A message whose complete parts are not valid UTF-8 (a
model emitting broken bytes: rare) is left to the caller's exact per-row loop, so the
U+FFFD rules stay those of the codec itself.

`decoder.ByteStream` is the reference for every rule here; the property tests hold the two
to each other.
"""

from __future__ import annotations

from bisect import bisect_right
from codecs import utf_8_decode
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.ragged import ragged_index, starts_of

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

# per lead byte: the length of the sequence it starts (0: not a lead byte, 1: ASCII)
_SEQ_LEN = np.zeros(256, np.int64)
_SEQ_LEN[:0x80] = 1
_SEQ_LEN[0xC2:0xE0] = 2
_SEQ_LEN[0xE0:0xF0] = 3
_SEQ_LEN[0xF0:0xF5] = 4
# per lead byte: the range its second byte must fall in for CPython's incremental decoder to
# hold the sequence (it holds ED A0..BF, a surrogate's start, and rejects it only once the
# third byte is there; the tests hold this table to `codecs.utf_8_decode`)
_LO = np.full(256, 0x80, np.int64)
_HI = np.full(256, 0xBF, np.int64)
_LO[0xE0], _LO[0xF0], _HI[0xF4] = 0xA0, 0x90, 0x8F


class FlatTable(NamedTuple):
    """A byte table as one buffer: id i's bytes are data[off[i]:off[i] + size[i]]. Two
    tables (specials kept, specials as b"") are stacked: `id + skip * stride` picks one."""

    data: U8
    off: I64
    size: I64
    stride: int  # vocab + 1: the out-of-vocabulary id `vocab` maps to b""
    # per stacked id, its attribution kind when pushed: 1 (zero-width) for a special id
    # of the skipping table (the per-row path never pushes it), else 0
    kind: I64


def flat_table(table: list[bytes], skip_table: list[bytes],
               specials: frozenset[int] = frozenset()) -> FlatTable:
    both = table + skip_table
    size = np.fromiter(map(len, both), np.int64, len(both))
    off = np.zeros(len(both), np.int64)
    np.cumsum(size[:-1], out=off[1:])
    data = np.frombuffer(b"".join(both), np.uint8)
    kind = np.zeros(len(both), np.int64)
    kind[[len(table) + i for i in specials if 0 <= i < len(table) - 1]] = 1
    return FlatTable(data, off, size, len(table), kind)


def _two_byte_holds() -> npt.NDArray[np.int8]:
    """Per pair of last bytes (b2 << 8 | b1), how many of them CPython's incremental
    decoder holds (b2 = 0 stands for "no byte": the row is shorter)."""
    from codecs import utf_8_decode

    out = np.zeros(1 << 16, np.int8)
    for b1 in range(0x80, 0x100):  # an ASCII last byte is never held
        for b2 in range(256):
            data = bytes((b2, b1))
            out[b2 << 8 | b1] = 2 - utf_8_decode(data, "replace", False)[1]
    return out


_HOLD2 = _two_byte_holds()


def held_tail(buf: U8, ends: I64, starts: I64) -> I64:
    """Per row [starts, ends) of `buf`, how many trailing bytes form a valid but incomplete
    UTF-8 sequence (held for the next row, as the incremental codec holds them).

    One table lookup on each row's last two bytes; only rows ending in two continuation
    bytes (the middle of a 4-byte character) look at a third."""
    n = len(ends)
    if not len(buf):
        return np.zeros(n, np.int64)
    size = ends - starts
    last = buf[np.maximum(ends - 1, 0)].astype(np.int64)
    last[size < 1] = 0
    second = buf[np.maximum(ends - 2, 0)].astype(np.int64)
    second[size < 2] = 0
    held = _HOLD2[second << 8 | last].astype(np.int64)
    third = buf[np.maximum(ends - 3, 0)]
    deep = np.flatnonzero(third >= 0xF0)  # rare: a 4-byte character's lead 3 bytes back
    if len(deep):  # lead F0..F4, a valid second byte, a continuation: three of four held
        deep = deep[size[deep] >= 3]
        lead, sec, lst = third[deep], second[deep], last[deep]
        four = ((_SEQ_LEN[lead] == 4) & (sec >= _LO[lead]) & (sec <= _HI[lead])
                & ((lst & 0xC0) == 0x80))
        held[deep[four]] = 3
    return held


class Decoded(NamedTuple):
    """One message's plain rows decoded: text of row r is text[chars[r]:chars[r + 1]] (and
    buf[cuts[r]:cuts[r + 1]] as UTF-8); `held` bytes per row go back to the slot."""

    text: str
    buf: U8  # the complete parts, concatenated: valid UTF-8
    cuts: I64  # n + 1 byte offsets into buf
    chars: I64  # n + 1 character offsets into text
    held_data: U8  # the held bytes of every row, concatenated
    held: I64  # per row
    parts: list[str] | None  # the rows' texts, when they had to be decoded one by one
    # with `anchors` asked, when every row's text is its bytes as they are (no U+FFFD):
    # per id, the byte offset in its row's text of the character boundary at or before
    # the id's first byte, or -1 when the row's text does not reach past that byte (the
    # id's text, if any, is still pending); and its attribution kind (`FlatTable.kind`)
    anchors: I64 | None = None
    kinds: I64 | None = None


def decode_rows(tab: FlatTable, ids: I64, id_starts: I64, table_sel: I64,
                pending: U8, pend_len: I64, skip_first: npt.NDArray[np.bool_],
                anchors: bool = False) -> Decoded | None:
    """Decode rows of ids (row r: ids[id_starts[r]:id_starts[r + 1]]) after their pending
    bytes (row r: pending[r, :pend_len[r]]).

    `table_sel` per row: 0 keeps special tokens, 1 skips them. `skip_first` per row: the
    row's first character is the one its prompt left incomplete; such a row with text is
    left to the exact loop (None). `anchors`: also where each id's attribution anchors
    (`Decoded.anchors`; shards/attributed.py).
    """
    n = len(id_starts) - 1
    counts = id_starts[1:] - id_starts[:-1]
    tid = ids + np.repeat(table_sel * tab.stride, counts)
    id_off, id_size = tab.off[tid], tab.size[tid]
    id_bytes = tab.data[ragged_index(id_off, id_size)]
    row_id_bytes = _row_sums(id_size, id_starts, counts)
    if pend_len.any():  # pending bytes go in front of their rows' id bytes
        row_bytes, buf, _ = pending_in_front(id_bytes, row_id_bytes, pending, pend_len)
    else:
        row_bytes, buf = row_id_bytes, id_bytes
    ends = np.cumsum(row_bytes)
    starts = ends - row_bytes
    held = held_tail(buf, ends, starts)
    cut_ends = ends - held
    any_held = bool(held.any())
    drop = np.zeros(0, np.int64)
    held_data = np.zeros(0, np.uint8)
    if any_held:
        hrows = np.flatnonzero(held)
        drop = ragged_index(cut_ends[hrows], held[hrows])
        held_data = buf[drop]
    if (skip_first & (cut_ends > starts)).any():
        # a prompt that ended mid-character: its held bytes and the row's first character
        # resolve by the codec's own rules (once per such request): the exact loop's job
        return None
    id_anchors = None
    if anchors:  # positions in `buf` as it is now (held tails still in)
        id_anchors = _anchors(buf, id_size, counts, pend_len, starts, cut_ends)
    if any_held:  # held bytes are row tails: a row's cut moves by what rows before held
        cut_ends = cut_ends - (np.cumsum(held) - held)
        buf = np.delete(buf, drop)
    cuts = np.empty(n + 1, np.int64)
    cuts[0] = 0
    cuts[1:] = cut_ends
    raw = buf.tobytes()
    # A held tail can expose what stood before it: in E5 A7 | C2 the codec held C2 and
    # judged E5 A7 broken, but cut off, E5 A7 would join the next row's bytes into one
    # character. Such a row's part must be decoded on its own (U+FFFD), not joined.
    if any_held and _exposed(buf, cut_ends[hrows], cuts[hrows]):
        return _row_by_row(raw, cuts, held_data, held)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _with_replacements(raw, cuts, held_data, held)
    if len(text) == len(raw):  # ASCII: characters are bytes
        chars = cuts
    else:
        starts_char = np.concatenate(([0], np.cumsum((buf & 0xC0) != 0x80)))
        chars = starts_char[cuts]
    kinds = tab.kind[tid] if anchors else None
    return Decoded(text, buf, cuts, chars, held_data, held, None, id_anchors, kinds)


def _anchors(buf: U8, id_size: I64, counts: I64, pend_len: I64, starts: I64,
             cut_ends: I64) -> I64:
    """Per id, the character boundary at or before its first byte, as a byte offset into
    its row's text, or -1 when that byte is at or past the row's cut (nothing of the text
    follows: the id waits). A row's text is its bytes up to the cut, valid UTF-8 whenever
    this is used (the caller drops these for U+FFFD rows), so the boundary is at most three
    continuation bytes back, and never before the row's start."""
    at = np.cumsum(id_size) - id_size  # the id's first byte among the id bytes
    if pend_len.any():  # every row's pending bytes come before its ids' bytes
        at = at + np.repeat(np.cumsum(pend_len), counts)
    row_start = np.repeat(starts, counts)
    inside = at < np.repeat(cut_ends, counts)
    if len(buf):
        last = len(buf) - 1
        for _ in range(3):
            back = inside & (at > row_start) & \
                ((buf[np.minimum(at, last)] & 0xC0) == 0x80)
            if not back.any():
                break
            at = at - back
    return np.where(inside, at - row_start, -1)


def pending_in_front(id_bytes: U8, row_id_bytes: I64, pending: U8,
                     pend_len: I64) -> tuple[I64, U8, npt.NDArray[np.bool_]]:
    """Each row's pending bytes (row r: pending[r, :pend_len[r]]) in front of its id bytes:
    the rows' byte counts, their bytes concatenated, and which bytes were pending. Placed
    beside the id bytes, never by copying the byte table (megabytes) per message."""
    row_bytes = row_id_bytes + pend_len
    total = int(row_bytes.sum())
    prow = np.flatnonzero(pend_len)
    row_at = np.cumsum(row_bytes) - row_bytes
    pdst = ragged_index(row_at[prow], pend_len[prow])
    is_pending = np.zeros(total, bool)
    is_pending[pdst] = True
    buf = np.empty(total, np.uint8)
    buf[pdst] = pending.reshape(-1)[ragged_index(prow * pending.shape[1], pend_len[prow])]
    buf[~is_pending] = id_bytes
    return row_bytes, buf, is_pending


def _exposed(buf: U8, ends: I64, starts: I64) -> bool:
    """Whether some row's part, cut before its held tail, ends in an incomplete sequence
    (only a part ending in a non-ASCII byte can: most held rows are looked at no further)."""
    if not len(buf):
        return False
    non_ascii = np.flatnonzero(buf[np.maximum(ends - 1, 0)] >= 0x80)
    return len(non_ascii) > 0 and bool(held_tail(buf, ends[non_ascii],
                                                 starts[non_ascii]).any())


def _with_replacements(raw: bytes, cuts: I64, held_data: U8, held: I64) -> Decoded:
    """Some row's bytes are not valid UTF-8 (the model emitted broken bytes): the rows that
    hold the broken bytes are decoded on their own with the codec's U+FFFD rules, the runs
    of rows between them at once. A row's complete part never ends in a valid incomplete
    sequence (that is held; `_exposed` rows went to `_row_by_row`), so a row boundary is a
    character boundary, no invalid sequence spans two rows, and each broken row's result is
    the incremental codec's. A Python step per broken row, not per row."""
    c = cuts.tolist()
    view, segs = memoryview(raw), []
    grow = np.zeros(len(c) - 1, np.int64)  # per row: bytes its U+FFFDs add
    at = 0
    while True:
        try:
            segs.append(utf_8_decode(view[at:c[-1]], "strict", True)[0])
            break
        except UnicodeDecodeError as e:
            r = bisect_right(c, at + e.start) - 1
            segs.append(utf_8_decode(view[at:c[r]], "strict", True)[0])
            part = raw[c[r]:c[r + 1]].decode("utf-8", "replace")
            segs.append(part)
            grow[r] = len(part.encode()) - (c[r + 1] - c[r])
            at = c[r + 1]
    text = "".join(segs)
    buf = np.frombuffer(text.encode(), np.uint8)
    byte_cuts = cuts.copy()
    byte_cuts[1:] += np.cumsum(grow)
    chars = np.concatenate(([0], np.cumsum((buf & 0xC0) != 0x80)))[byte_cuts]
    return Decoded(text, buf, byte_cuts, chars, held_data, held, None)


def _row_by_row(raw: bytes, cuts: I64, held_data: U8, held: I64) -> Decoded:
    """Each row decoded on its own with the codec's U+FFFD rules: a row's part that ends
    mid-character must not be joined to the next row's bytes."""
    c = cuts.tolist()
    parts = [raw[a:b].decode("utf-8", "replace") for a, b in zip(c, c[1:])]
    sent = [p.encode() for p in parts]
    buf = np.frombuffer(b"".join(sent), np.uint8)
    byte_cuts = starts_of(np.fromiter(map(len, sent), np.int64, len(sent)))
    chars = starts_of(np.fromiter(map(len, parts), np.int64, len(parts)))
    return Decoded("".join(parts), buf, byte_cuts, chars, held_data, held, parts)


def _row_sums(sizes: I64, starts: I64, counts: I64) -> I64:
    if len(sizes) == len(counts):
        if (counts == 1).all():
            return sizes
    total = np.concatenate(([0], np.cumsum(sizes)))
    return total[starts[1:]] - total[starts[:-1]]
