"""Byte-level BPE rows decoded one at a time against their slots: the reference loop.

Each row goes through the family's one codec step (shards/byte_level/codec.py). A slot's
numbers are read with one gather per message (`heads`); when a message names a slot twice
its rows share one `heads` entry, updated in place, so the slot's later rows see what its
earlier ones left. The id lookup (shards/byte_level/lookup.py) sends here the rows it
cannot look up; one suite holds both to the full decode.
"""

from __future__ import annotations

from ..decoding.interface import Attrs
from ..decoding.slots import ATTR, PEND, SEL, SKIP, Slots
from .attribution import Drops, Strs, Tables, attributed_rows
from .codec import push


def decode_loop(tables: Tables, vocab: int, state: Slots, slots: list[int],
                heads: list[list[int]], row_ids: list[list[int]] | None,
                singles: list[int] | None, strs: Strs, drops: Drops
                ) -> tuple[list[str], Attrs | None]:
    """Decode rows in order: row r's ids are `row_ids[r]`, or the one id `singles[r]` (ids
    in [0, vocab]). With `strs` (each id's text when its bytes are whole characters), a
    one-id row on a slot with nothing pending or to pass over is a list lookup: most rows
    of most text. Rows whose request asked for attribution also get theirs (None for the
    others; None for all when none asked)."""
    if state.attr_live and any(h[ATTR] for h in heads):
        return attributed_rows(tables, vocab, state, slots, heads, row_ids, singles, drops)
    texts: list[str] = []
    if singles is not None:
        for slot, head, i in zip(slots, heads, singles):
            if not (head[PEND] or head[SKIP]):
                whole = strs[head[SEL]][i]
                if whole is not None:
                    texts.append(whole)
                    continue
            texts.append(push(state, slot, head, tables[head[SEL]][i]))
        return texts, None
    assert row_ids is not None
    for slot, head, ids in zip(slots, heads, row_ids):
        table = tables[head[SEL]]
        texts.append(push(state, slot, head, b"".join([table[i] for i in ids])))
    return texts, None
