"""Byte-level BPE's attribution: one rule, on both paths.

Every pushed id gets one [token_id, kind, byte_offset], in push order (`Attributor`,
shards/attribution.py); an id whose bytes complete text is anchored at the start of the
text its push released, ids pending before it (bytes of an incomplete character, or no
bytes at all) there too; a skipped special is zero-width at the text so far; entries
leave in order, so those after a pending id wait with it. On the array path that is
arithmetic on byte positions: in a row's buffer (the slot's pending bytes, then each id's
bytes), an id starting at byte p is anchored at the character boundary at or before p when
the row's text reaches past p, and is pending otherwise. A pending id (and whatever
follows it) is carried in `Slots.carry` and released at offset 0 of the next delta with
text, which the pending bytes begin.

The rule itself (`push_attributed`: the ids through the codec step one at a time, an
`Attributor` fed as each text comes) is how a per-row request attributes its rows, how the
reference loop (shards/byte_rows.py) attributes every row (`attributed_row`), and how the
id lookup (shards/mapped.py) attributes the rows that are not the simple case: broken UTF-8
(U+FFFD rows), a prompt's incomplete character, pending bytes.
"""

from __future__ import annotations

from collections.abc import Container

import numpy as np
import numpy.typing as npt

from .attribution import PENDING, VISIBLE, Attributor
from .byte_codec import push
from .row_decoder import Attribution, Carry, row_in_vocab
from .slots import Slots

I64 = npt.NDArray[np.int64]


def push_attributed(table: list[bytes], vocab: int, drop: Container[int], state: Slots,
                    slot: int, head: list[int], ids: list[int], attr: Attributor) -> str:
    """The family's rule: a row's ids through the codec step one at a time, each attributed
    as its text comes (a skipped special is zero-width where the text stands); the new
    text. Ids as given (any int: one outside the vocabulary decodes as `vocab`, and is
    reported as given)."""
    parts = []
    for tid, safe in zip(ids, row_in_vocab(ids, vocab)):
        if tid in drop:
            attr.zero_width(tid)
            continue
        t = push(state, slot, head, table[safe])
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
