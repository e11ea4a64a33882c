"""Which trailing bytes of each row are an incomplete UTF-8 character, for whole arrays of
rows: what `codecs.utf_8_decode(..., final=False)` holds for the next row, found with
vectorised byte tests instead of a codec call per row (the byte-fallback decoder,
shards/byte_fallback/codec.py, decodes a message's rows as one buffer with these).

`codecs.utf_8_decode` is the reference for every rule here; the tests hold the two to each
other.
"""

from __future__ import annotations

from codecs import utf_8_decode

import numpy as np
import numpy.typing as npt

from sglang_tok.ragged import ragged_index

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


def _two_byte_holds() -> npt.NDArray[np.int8]:
    """Per pair of last bytes (b2 << 8 | b1), how many of them CPython's incremental
    decoder holds (b2 = 0 stands for "no byte": the row is shorter)."""
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
