"""SentencePiece byte fallback's codec step, and whole-array decoding of a message's rows
(Llama-2, Mistral, Gemma): one message's rows in a fixed number of numpy calls in the
common case.

Their `tokenizers` decoder chain is Replace("▁", " "), ByteFallback, Fuse and, for most,
Strip(" ", 1, 0). Per id that makes the full decode a concatenation of:
- a text id (any id that is not a byte id): its piece with "▁" as " ", bytes fixed per id;
- a run of consecutive <0xNN> byte ids: its bytes as UTF-8 if the whole run is valid, else
  one U+FFFD per byte (ByteFallback decides per run, so an open run is held);
- skipped specials and ids outside the vocabulary: nothing, and they do not end a run
  (`decode` drops them before the decoder runs); a kept special is a text id;
and then Strip drops one " " at the start of the whole text only (shards/byte_fallback/
table.py holds it per id, checked against `tokenizers` itself).

So a slot needs: the open run's bytes, whether the whole text has begun (the strip is
spent), and, only after a prompt that ended inside a run, how many characters of the
prompt's own decode of that run are still to be passed over (the contract is
decode(P + I)[len(decode(P)):]). Per message the rows are gathered into one buffer with
the slots' runs in front, each row's trailing run is cut off and held, and the rest is
decoded by one `bytes.decode`: the text pieces are valid UTF-8 and every closed run is
followed by one, so the buffer decodes only if every closed run is valid. A message with
an invalid run (a model emitting broken bytes) or a row passing over a prompt's run is
finished in Python for those runs and rows only. Nothing returns None.

`step` is the family's one codec step, a row at a time in plain Python: a per-row request's
rows, and `decode_rows_loop` (the small message path and the reference for the array
code); the property tests hold both to the full `tokenizer.decode`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.ragged import ragged_index, starts_of

from ..decoding.interface import row_in_vocab
from .held_bytes import pending_in_front
from .table import BYTE, TEXT, FallbackTable

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

_FFFD = "\ufffd".encode()


class PromptState(NamedTuple):
    """A slot's state after its prompt: the open run, whether the text has begun, and how
    many characters to pass over (what decode(P) made of an open run at its end)."""

    run: bytes
    started: bool
    skip: int


def prompt_state(tab: FallbackTable, prompt_ids: list[int], sel: int) -> PromptState:
    """The state a prompt leaves (ids any int), with id table `sel`."""
    base, pieces, kinds = sel * tab.stride, tab.pieces, tab.kinds
    run = bytearray()
    started = False
    for i in row_in_vocab(prompt_ids, tab.stride - 1):
        kind = kinds[base + i]
        if kind == BYTE:
            run += pieces[base + i]
        elif kind == TEXT:
            started = True
            run.clear()
    return PromptState(bytes(run), started, len(finish(tab, bytes(run), started, 0)))


def finish(tab: FallbackTable, run: bytes, started: bool, skip: int) -> str:
    """The text a slot's state still owes at the end of the request: its open run's."""
    if not run:
        return ""
    text = _run_text(run)
    if tab.strip and not started and text.startswith(" "):
        text = text[1:]
    return text[skip:]


def _run_text(run: bytes) -> str:
    try:
        return run.decode()
    except UnicodeDecodeError:
        return "\ufffd" * len(run)


class FallbackDecoded(NamedTuple):
    """One message's rows: row r's text is text[chars[r]:chars[r + 1]] (and
    buf[cuts[r]:cuts[r + 1]] as UTF-8). Back to the slots: row r's open run is
    held_data[held_starts[r]:held_starts[r + 1]] (held[r] bytes), `started`, `skip`."""

    text: str
    buf: U8
    cuts: I64
    chars: I64
    held_data: U8
    held: I64
    started: B
    skip: I64
    parts: list[str] | None  # the rows' texts, when they were made one by one


def decode_rows_fallback(tab: FallbackTable, ids: I64, id_starts: I64, table_sel: I64,
                         run_bytes: U8, run_len: I64, started: B,
                         skip: I64) -> FallbackDecoded:
    """Decode rows of ids (row r: ids[id_starts[r]:id_starts[r + 1]], each in
    [0, vocab], vocab meaning out of the vocabulary) after their slots' open runs (row r:
    run_bytes[r, :run_len[r]]). `table_sel` per row: 0 keeps specials, 1 skips them.
    Each row must be of a different slot (the caller's `_distinct`)."""
    n = len(id_starts) - 1
    if not n:
        return decode_rows_loop(tab, ids, id_starts, table_sel, run_bytes, run_len, started,
                                skip)
    counts = id_starts[1:] - id_starts[:-1]
    tid = ids + np.repeat(table_sel * tab.stride, counts)
    seg_size = tab.size[tid]
    id_bytes = tab.data[ragged_index(tab.off[tid], seg_size)]
    id_run = np.repeat(tab.kind[tid] == BYTE, seg_size)  # per byte: of a byte run
    total = starts_of(seg_size)
    row_bytes = total[id_starts[1:]] - total[id_starts[:-1]]
    if run_len.any():  # the open runs in front of each row's ids
        row_bytes, buf, is_run = pending_in_front(id_bytes, row_bytes, run_bytes, run_len)
        run_flags = np.empty(len(buf), bool)
        run_flags[is_run] = True
        run_flags[~is_run] = id_run
    else:
        buf, run_flags = id_bytes, id_run
    ends = np.cumsum(row_bytes)
    starts = ends - row_bytes
    held = np.zeros(n, np.int64)
    held_data = np.zeros(0, np.uint8)
    run_at = None
    if run_flags.any():
        buf, run_at, starts, ends, held, held_data = _hold_trailing_runs(
            buf, run_flags, starts, ends)
    cuts = np.empty(n + 1, np.int64)
    cuts[0] = 0
    cuts[1:] = ends
    sent = ends > starts
    new_started = started | sent
    raw = buf.tobytes()
    if run_at is not None and run_at.any():
        try:
            raw.decode()
        except UnicodeDecodeError:  # some closed run is not valid UTF-8: U+FFFD per byte
            buf, cuts = _replace_invalid_runs(raw, buf, run_at, cuts)
            raw = buf.tobytes()
    if tab.strip and len(buf) and not started.all():
        buf, cuts, stripped = _strip_first_space(buf, cuts, started, sent)
        if stripped:
            raw = buf.tobytes()
    text = raw.decode()
    if len(text) == len(raw):  # ASCII: characters are bytes
        chars = cuts
    else:
        chars = starts_of(((buf & 0xC0) != 0x80).astype(np.int64))[cuts]
    parts = None
    new_skip = skip
    if (skip.astype(bool) & sent).any():
        text, buf, cuts, chars, new_skip, parts = _pass_over(text, chars, skip)
    return FallbackDecoded(text, buf, cuts, chars, held_data, held, new_started, new_skip, parts)


def _hold_trailing_runs(buf: U8, run_at: B, starts: I64,
                        ends: I64) -> tuple[U8, B, I64, I64, I64, U8]:
    """Each row's trailing byte run is held for its slot, not sent: the bytes left, which of
    them are run bytes, the rows' new starts and ends, the held count per row and the held
    bytes."""
    held_data = np.zeros(0, np.uint8)
    # per byte: 1 + the position of the last text byte at or before it (0: none)
    last_text = np.maximum.accumulate(np.where(run_at, 0, np.arange(1, len(buf) + 1)))
    tail_from = np.maximum(last_text[np.maximum(ends - 1, 0)], starts)
    held = np.where(ends > starts, ends - tail_from, 0)
    if held.any():
        drop = ragged_index(ends - held, held)
        held_data = buf[drop]
        keep = np.ones(len(buf), bool)
        keep[drop] = False
        buf, run_at = buf[keep], run_at[keep]
        kept_before = starts_of(keep.astype(np.int64))
        starts, ends = kept_before[starts], kept_before[ends]
    return buf, run_at, starts, ends, held, held_data


def _strip_first_space(buf: U8, cuts: I64, started: B, sent: B) -> tuple[U8, I64, bool]:
    """A row that sends its first text drops that text's leading space (the tokenizer's
    Strip decoder): the bytes and cuts after, and whether any row had one."""
    lead = buf[np.minimum(cuts[:-1], len(buf) - 1)]
    strip_rows = np.flatnonzero(~started & sent & (lead == 0x20))
    if not len(strip_rows):
        return buf, cuts, False
    keep = np.ones(len(buf), bool)
    keep[cuts[strip_rows]] = False
    return buf[keep], starts_of(keep.astype(np.int64))[cuts], True


def _replace_invalid_runs(raw: bytes, buf: U8, run_at: B, cuts: I64) -> tuple[U8, I64]:
    """Each closed run that is not valid UTF-8 becomes one U+FFFD per byte (rare: once per
    broken run, in Python)."""
    edge = np.diff(np.concatenate(([0], run_at.view(np.int8), [0])))
    run_s, run_e = np.flatnonzero(edge == 1).tolist(), np.flatnonzero(edge == -1).tolist()
    chunks, grow, at = [], np.zeros(len(cuts), np.int64), 0
    for s, e in zip(run_s, run_e):
        try:
            raw[s:e].decode()
        except UnicodeDecodeError:
            chunks += [raw[at:s], _FFFD * (e - s)]
            at = e
            grow[np.searchsorted(cuts, s, "right")] += 2 * (e - s)
    chunks.append(raw[at:])
    return np.frombuffer(b"".join(chunks), np.uint8), cuts + np.cumsum(grow)


def _pass_over(text: str, chars: I64, skip: I64) -> tuple[str, U8, I64, I64, I64, list[str]]:
    """Rows whose prompt ended inside a run pass over what decode(P) made of it (rare)."""
    c = chars.tolist()
    parts = [text[a:b] for a, b in zip(c, c[1:])]
    left = skip.copy()
    for r in np.flatnonzero(skip).tolist():
        k = min(int(skip[r]), len(parts[r]))
        parts[r] = parts[r][k:]
        left[r] -= k
    joined = "".join(parts)
    sent = [p.encode() for p in parts]
    buf = np.frombuffer(b"".join(sent), np.uint8)
    cuts = starts_of(np.fromiter(map(len, sent), np.int64, len(sent)))
    return (joined, buf, cuts, starts_of(np.fromiter(map(len, parts), np.int64, len(parts))),
            left, parts)


def step(tab: FallbackTable, base: int, ids: list[int], run: bytes, begun: bool,
         skip: int) -> tuple[str, bytes, bool, int]:
    """The family's one codec step: a row's ids (in [0, vocab], with the id table at
    `base`) after the slot's open run: the row's text, then the slot's open run, whether
    its text has begun and the characters still to pass over."""
    pieces, kinds, texts = tab.pieces, tab.kinds, tab.texts
    out: list[str] = []
    for i in ids:
        kind = kinds[base + i]
        if kind == BYTE:
            run += pieces[base + i]
        elif kind == TEXT:
            if run:
                out.append(_run_text(run))
                run = b""
            out.append(texts[base + i])
    text = "".join(out)
    if text and not begun:
        begun = True
        if tab.strip and text[0] == " ":
            text = text[1:]
    if skip and text:
        k = min(skip, len(text))
        text, skip = text[k:], skip - k
    return text, run, begun, skip


def decode_rows_loop(tab: FallbackTable, ids: I64, id_starts: I64, table_sel: I64,
                     run_bytes: U8, run_len: I64, started: B, skip: I64) -> FallbackDecoded:
    """`decode_rows_fallback`, one row at a time through `step`: the same arguments and
    result (with `parts`), for small messages and as the reference for the array code."""
    stride = tab.stride
    id_list, st, sel = ids.tolist(), id_starts.tolist(), table_sel.tolist()
    lens, begun, skips = run_len.tolist(), started.tolist(), skip.tolist()
    parts: list[str] = []
    held: list[bytes] = []
    for r in range(len(sel)):
        run = run_bytes[r, :lens[r]].tobytes() if lens[r] else b""
        text, run, begun[r], skips[r] = step(tab, sel[r] * stride, id_list[st[r]:st[r + 1]],
                                             run, begun[r], skips[r])
        parts.append(text)
        held.append(run)
    joined = "".join(parts)
    sent = [p.encode() for p in parts]
    held_len = np.fromiter(map(len, held), np.int64, len(held))
    return FallbackDecoded(
        joined, np.frombuffer(b"".join(sent), np.uint8),
        starts_of(np.fromiter(map(len, sent), np.int64, len(sent))),
        starts_of(np.fromiter(map(len, parts), np.int64, len(parts))),
        np.frombuffer(b"".join(held), np.uint8), held_len, np.array(begun, bool),
        np.array(skips, np.int64), parts)
