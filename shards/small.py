"""The array path for a message of few rows: a plain loop over the same per-slot state.

A whole-array operation costs about a microsecond whatever its size, so a 16-row frame
(16 concurrent requests) would pay more in calls than in work. Here a message's slots are
read with one gather of their rows of `Slots.meta`, each row is decoded as
`decoder.ByteStream.push` does, and the rows are written back with one assignment: a
handful of numpy calls per message instead of dozens. Same state, same results (the
property tests run both paths); only byte-level tokenizers, the common case (a byte-fallback
tokenizer's small messages take `plain_fallback`'s own loop).
"""

from __future__ import annotations

from codecs import utf_8_decode

import numpy as np

from .slots import COMPLETION, PEND, RING, RING_LEN, SEL, SKIP, Slots


def decode_small(tables: tuple[list[bytes], list[bytes]], vocab: int, state: Slots,
                 slots: list[int], meta: list[list[int]], row_ids: list[list[int]]
                 ) -> list[str]:
    """Decode one row per slot (slots distinct), updating `meta` (the slots' rows of
    `state.meta`, written back by the caller), the pending bytes and the id rings."""
    pending = state.pending
    texts: list[str] = []
    ring_at: list[int] = []
    ring_ids: list[int] = []
    for slot, m, ids in zip(slots, meta, row_ids):
        table = tables[m[SEL]]
        if len(ids) == 1:
            i = ids[0]
            safe = ids if 0 <= i < vocab else [vocab]
            data = table[safe[0]]
        else:
            safe = ids if not ids or (min(ids) >= 0 and max(ids) < vocab) else \
                [i if 0 <= i < vocab else vocab for i in ids]
            data = b"".join([table[i] for i in safe])
        held = m[PEND]
        if held:
            data = pending[slot, :held].tobytes() + data
        text, used = utf_8_decode(data, "replace", False)
        rest = len(data) - used
        if rest:
            pending[slot, :rest] = np.frombuffer(data, np.uint8, rest, used)
        m[PEND] = rest
        if m[SKIP] and text:
            text = text[1:]
            m[SKIP] = 0
        m[COMPLETION] += len(ids)
        n = m[RING_LEN]
        if len(safe) == 1:
            ring_at.append(slot * RING + n % RING)
        else:
            ring_at += [slot * RING + (n + k) % RING for k in range(len(safe))]
        ring_ids += safe
        m[RING_LEN] = n + len(safe)
        texts.append(text)
    if ring_at:
        state.ring.reshape(-1)[ring_at] = ring_ids
    return texts
