"""Byte-level BPE's attribution: one rule, on both paths.

Every pushed id gets one [token_id, kind, byte_offset], in push order (`Attributor`,
shards/decoding/attribution.py); an id whose bytes complete text is anchored at the start
of the text its push released, ids pending before it (bytes of an incomplete character, or
no bytes at all) there too; a skipped special is zero-width at the text so far; entries
leave in order, so those after a pending id wait with it. On the array path that is
arithmetic on byte positions: in a row's buffer (the slot's pending bytes, then each id's
bytes), an id starting at byte p is anchored at the character boundary at or before p when
the row's text reaches past p, and is pending otherwise. A pending id (and whatever follows
it) is carried in `Slots.carry` and released at offset 0 of the next delta with text, which
the pending bytes begin.

The rule itself (`push_attributed`: the ids through the codec step one at a time, an
`Attributor` fed as each text comes) is how a per-row request attributes its rows, how the
reference loop (shards/byte_level/loop.py) attributes every row (`attributed_rows`), and
how the id lookup's rows are attributed (`decode_attributed`) where they are not the simple
case: broken UTF-8 (U+FFFD rows), a prompt's incomplete character, pending bytes. Every
byte-level attribution is here; what a request's end adds is `ending.finish_row`."""

from __future__ import annotations

from collections.abc import Container

import numpy as np
import numpy.typing as npt

from ..decoding.attribution import PENDING, VISIBLE, Attributor
from ..decoding.interface import Attribution, Attrs, Carry
from ..decoding.slots import ATTR, PEND, SEL, SKIP, Slots
from .codec import push
from .lookup import IdTexts, decode_mapped

I64 = npt.NDArray[np.int64]
Tables = list[list[bytes]]  # per id table (`Slots.table_sel`): each id's bytes
Strs = list[list[str | None]]  # the same: each id's text when its bytes are whole characters
Drops = list[frozenset[int]]  # the same: the ids skipped (zero-width)


def push_attributed(table: list[bytes], vocab: int, drop: Container[int], state: Slots,
                    slot: int, head: list[int], ids: list[int], attr: Attributor) -> str:
    """The family's rule: a row's ids through the codec step one at a time, each attributed
    as its text comes (a skipped special is zero-width where the text stands); the new
    text. Ids in [0, vocab] (mapped by the caller: `vocab` is the id outside it)."""
    parts = []
    for tid in ids:
        if tid in drop:
            attr.zero_width(tid)
            continue
        t = push(state, slot, head, table[tid])
        attr.pushed(tid, len(t))
        if t:
            parts.append(t)
    return "".join(parts)


def attributed_row(table: list[bytes], vocab: int, drop: Container[int], state: Slots,
                   slot: int, head: list[int], ids: list[int]
                   ) -> tuple[str, list[Attribution]]:
    """One row of a plain slot by the rule (`push_attributed`): its text and attributions
    (offsets local to the text); the entries it leaves pending go to `Slots.carry`. Cold
    path: a Python step per id."""
    attr = Attributor()
    carry = state.carry.pop(slot, None)
    if carry:  # a carried zero-width entry sits where the carried text will begin: 0
        attr.queue = [[tid, kind, PENDING if kind == VISIBLE else 0] for tid, kind in carry]
    text = push_attributed(table, vocab, drop, state, slot, head, ids, attr)
    released = attr.release(0, text)
    if attr.queue:
        state.carry[slot] = [(tid, kind) for tid, kind, _ in attr.queue]
    return text, released


def one_id_row(carry: dict[int, Carry], slot: int, tid: int, kind: int,
               text: str) -> list[Attribution]:
    """A row of one id, whatever its decode (pending bytes, U+FFFD, a prompt's character):
    the id's push made the row's whole text, so it and the ids carried in are anchored at
    0 when there is text; else a visible id waits, and so does anything behind a waiting
    one."""
    carry_in = carry.pop(slot, None)
    if text:
        if carry_in:
            return [*((t, k, 0) for t, k in carry_in), (tid, kind, 0)]
        return [(tid, kind, 0)]
    if carry_in or kind == VISIBLE:
        carry[slot] = [*(carry_in or ()), (tid, kind)]
        return []
    return [(tid, kind, 0)]


def one_id_rows(carry: dict[int, Carry], slots: I64, ids: list[int], kinds: I64,
                texts: list[str]) -> list[list[Attribution]]:
    """`one_id_row` for a message of one id per row, decoded: one entry at 0 per row (C
    speed), and a Python step for the rows with no text or with ids carried in."""
    n = len(ids)
    attrs: list[list[Attribution]] = list(map(list, zip(zip(ids, kinds.tolist(), [0] * n))))
    odd = (np.fromiter(map(len, texts), np.int64, n) == 0) & (kinds == VISIBLE)
    if carry:
        odd |= np.isin(slots, np.fromiter(carry, np.int64, len(carry)))
    rows = odd.nonzero()[0].tolist()
    if rows:
        slot_list, kind_list = slots[rows].tolist(), kinds[rows].tolist()
        for r, slot, kind in zip(rows, slot_list, kind_list):
            attrs[r] = one_id_row(carry, slot, ids[r], kind, texts[r])
    return attrs


def queue_row(carry_in: Carry | None, own: list[Attribution], first: int | None,
              text_bytes: int) -> tuple[list[Attribution], Carry | None]:
    """One row's release by the queue rules: entries carried in leave at offset 0 if the
    row has text (else the whole row joins them); the row's own entries leave up to its
    first pending visible id (`first`), which starts the carry out."""
    if carry_in and not text_bytes:
        return [], carry_in + [(tid, kind) for tid, kind, _ in own]
    out = [(tid, kind, 0) for tid, kind in carry_in] if carry_in else []
    if first is None:
        return out + own, None
    return out + own[:first], [(tid, kind) for tid, kind, _ in own[first:]]


def attributed_rows(tables: Tables, vocab: int, state: Slots, slots: list[int],
                heads: list[list[int]], row_ids: list[list[int]] | None,
                singles: list[int] | None, drops: Drops) -> tuple[list[str], Attrs]:
    """The reference loop (`rows.decode_loop`) for a message with rows that want
    attribution: those go id by id through the rule (`attributed_row`), which also decodes
    them; the others through the codec step."""
    texts: list[str] = []
    attrs: Attrs = []
    for r, (slot, head) in enumerate(zip(slots, heads)):
        sel = head[SEL]
        ids = [singles[r]] if singles is not None else row_ids[r]  # type: ignore[index]
        got: list[Attribution] | None = None
        if head[ATTR]:
            text, got = attributed_row(tables[sel], vocab, drops[sel], state, slot, head, ids)
        else:
            table = tables[sel]
            text = push(state, slot, head, b"".join([table[i] for i in ids]))
        texts.append(text)
        attrs.append(got)
    return texts, attrs


# ------------------------------------------------------------------ the id lookup's rows
def decode_attributed(id_texts: IdTexts, tables: list[list[bytes]], vocab: int,
                      drops: list[frozenset[int]], state: Slots, slots: I64,
                      meta: I64, want: npt.NDArray[np.bool_], ids: I64,
                      id_starts: I64 | None = None
                      ) -> tuple[list[str], list[list[Attribution] | None]]:
    """`decode_mapped` for a message with rows that want attribution (`want`), and their
    attributions (None for the other rows).

    One id per row: every row decoded as usual, then `attributed.one_id_rows`. Rows of
    several ids: a wanting row whose ids are whole characters, on a slot holding no bytes,
    nothing to pass over and no ids pending, is its ids' texts: each id is anchored at the
    bytes of the ids before it in the row (whole-column work; an id with no bytes and no
    text after it waits for the next row's text, `Slots.carry`). Any other wanting row goes
    id by id through the family's rule (`attributed_row`), which also decodes it.
    """
    if id_starts is None:
        return _one_id_attributed(id_texts, state, slots, meta, want, ids)
    stride = id_texts.stride
    counts = id_starts[1:] - id_starts[:-1]
    where = ids + np.repeat(meta[:, SEL] * stride, counts)
    broken = np.concatenate(([0], np.cumsum(~id_texts.whole[where])))
    whole = broken[id_starts[1:]] == broken[id_starts[:-1]]
    simple = want & whole & (meta[:, PEND] == 0) & (meta[:, SKIP] == 0)
    carry = state.carry
    if carry:
        simple &= ~np.isin(slots, np.fromiter(carry, np.int64, len(carry)))
    exact = want & ~simple
    texts = decode_mapped(id_texts, state, slots, meta, ids, id_starts, exact)
    kinds, sizes = id_texts.kind[where], id_texts.size[where]
    id_list, kind_list = ids.tolist(), kinds.tolist()
    slot_list = slots.tolist()
    total = np.concatenate(([0], np.cumsum(sizes)))
    before = total[:-1] - np.repeat(total[id_starts[:-1]], counts)  # bytes before, in row
    row_bytes = total[id_starts[1:]] - total[id_starts[:-1]]
    row_rep = np.repeat(row_bytes, counts)
    inside = before < row_rep
    offs = np.where(inside, before, row_rep)
    wait_ids = ~inside & (kinds == 0)
    tuples = list(zip(id_list, kind_list, offs.tolist()))
    cuts = id_starts.tolist()
    attrs: list[list[Attribution] | None] = \
        list(map(tuples.__getitem__, map(slice, cuts, cuts[1:])))
    seen = np.concatenate(([0], np.cumsum(wait_ids)))
    leaving = (simple & (seen[id_starts[1:]] > seen[id_starts[:-1]])).nonzero()[0]
    for r in leaving.tolist():  # an id with no bytes and no text after it: it waits
        a, b = cuts[r], cuts[r + 1]
        first = int(np.argmax(wait_ids[a:b]))
        attrs[r], left = queue_row(None, tuples[a:b], first, int(row_bytes[r]))
        if left:
            carry[slot_list[r]] = left
    if not want.all():
        attrs = [x if w else None for x, w in zip(attrs, want.tolist())]
    rows = exact.nonzero()[0].tolist()
    for r, head in zip(rows, meta[rows].tolist()):  # id by id, through the per-row rules
        sel = head[SEL]
        texts[r], attrs[r] = attributed_row(tables[sel], vocab, drops[sel], state,
                                            slot_list[r], head, id_list[cuts[r]:cuts[r + 1]])
    return texts, attrs


def _one_id_attributed(id_texts: IdTexts, state: Slots, slots: I64, meta: I64,
                       want: npt.NDArray[np.bool_], ids: I64
                       ) -> tuple[list[str], list[list[Attribution] | None]]:
    """One id per row: every row decoded as usual, then `attributed.one_id_rows`."""
    n, stride = len(slots), id_texts.stride
    texts = decode_mapped(id_texts, state, slots, meta, ids)
    asked = want.nonzero()[0]
    every = len(asked) == n
    found = one_id_rows(state.carry, slots if every else slots[asked],
                        ids.tolist() if every else ids[asked].tolist(),
                        id_texts.kind[ids + meta[:, SEL] * stride] if every else
                        id_texts.kind[ids[asked] + meta[asked, SEL] * stride],
                        texts if every else [texts[r] for r in asked.tolist()])
    if every:
        return texts, list(found)
    out: list[list[Attribution] | None] = [None] * n
    for j, entries in zip(asked.tolist(), found):
        out[j] = entries
    return texts, out
