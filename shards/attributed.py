"""Attribution on the array path (byte-level BPE): the per-row path's rules, per slot.

`sglang_tok/attribution.py` (`Attributor`, driven by `Request._push_attributed`) defines
them: every pushed id gets one [token_id, kind, byte_offset], in push order; an id whose
bytes complete text is anchored at the start of the text its push released, ids pending
before it (bytes of an incomplete character, or no bytes at all) there too; a skipped
special is zero-width at the text so far; entries leave in order, so those after a
pending id wait with it. For byte-level BPE that is arithmetic on byte positions: in a
row's buffer (the slot's pending bytes, then each id's bytes), an id starting at byte p
is anchored at the character boundary at or before p when the row's text reaches past
p, and is pending otherwise. A pending id (and whatever follows it) is carried in
`Slots.carry` and released at offset 0 of the next delta with text, which the pending
bytes begin.

The exact reference (`attributed_push`: a `ByteStream` and an `Attributor` fed id by id,
as the per-row path does) is how the reference loop (shards/byte_rows.py) attributes
every row, and how the id lookup (shards/mapped.py) attributes the rows that are not the
simple case: broken UTF-8 (U+FFFD rows), a prompt's incomplete character, pending bytes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sglang_tok.attribution import PENDING, VISIBLE, ZERO_WIDTH, Attributor, push_attributed
from sglang_tok.decoder import ByteStream

I64 = npt.NDArray[np.int64]
Attribution = tuple[int, int, int]
Carry = list[tuple[int, int]]  # (token_id, kind) of entries still pending, in push order


def attributed_push(table: list[bytes], vocab: int, drop: frozenset[int] | tuple[()],
                    pending: bytes, skip: int, carry: Carry | None, ids: list[int]
                    ) -> tuple[str, bytes, int, list[Attribution], Carry | None]:
    """One row as the per-row path decodes and attributes it (`Request._push_attributed`):
    its text, the pending bytes and skip after it, its attributions (offsets local to the
    text) and the entries it leaves pending. Cold path: a Python step per id."""
    stream = ByteStream(table)
    stream.pending, stream.skip = pending, skip
    attr = Attributor()
    if carry:  # a carried zero-width entry sits where the carried text will begin: 0
        attr.queue = [[tid, kind, PENDING if kind == VISIBLE else 0] for tid, kind in carry]
    text = push_attributed(stream, attr, ids, drop, vocab)
    released = attr.release(0, text)
    left = [(tid, kind) for tid, kind, _ in attr.queue] or None
    return text, stream.pending, stream.skip, released, left


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


def finish_row(released: list[Attribution], carry: Carry | None, text_bytes: int,
               flushed: bool, stop: int | None) -> list[Attribution]:
    """A last row decoded as a running one (its stop token an empty, visible id: always
    carried, last): what the end adds (`Request.row` with a finish). The trimmed stop token
    (`stop`, its real id) is zero-width; the flush's text (`flushed`: the held bytes came
    out as U+FFFD) anchors pending ids where it begins, the row's text end; with no flush
    text they become zero-width there (`Attributor.end`)."""
    if not carry:
        return released
    out = list(released)
    last = len(carry) - 1
    for k, (tid, kind) in enumerate(carry):
        if stop is not None and k == last:
            tid, kind = stop, ZERO_WIDTH
        elif not flushed:
            kind = ZERO_WIDTH
        out.append((tid, kind, text_bytes))
    return out


def carry_into(attr: Attributor, carry: Carry | None) -> None:
    """A slot moving to the per-row path (an ERROR, ABORT or matched stop string) hands its
    pending entries to the request's `Attributor` (whose text starts there: offset 0)."""
    if carry:
        attr.queue = [[tid, kind, PENDING if kind == VISIBLE else 0] for tid, kind in carry]
