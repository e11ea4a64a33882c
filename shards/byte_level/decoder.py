"""Byte-level BPE: the reference loop and the id lookup, one interface, both paths.

A byte-level id is a fixed run of bytes, so a slot's whole state is the bytes of an
incomplete character it holds and, after a prompt that ended inside one, a character to
pass over; one codec step advances it (shards/byte_level/codec.py). `ByteLoop` decodes a
message's rows one by one (shards/byte_level/loop.py) and a per-row request's rows as they
come; `ByteLookup` looks a message's rows up by their ids' texts
(shards/byte_level/lookup.py) when the message is large enough to pay for its fixed cost in
numpy calls and names each slot once, and leaves every other message, and every per-row
request, to the loop."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import TokenizerInfo

from ..decoding.attribution import Attributor
from ..decoding.interface import Decoded, PlainRows, row_in_vocab
from ..decoding.slots import ATTR, SEL, Slots, SlotStart
from .attribution import decode_attributed, push_attributed
from .codec import flush_held, prompt_state, push
from .lookup import IdTexts, decode_mapped
from .loop import decode_loop
from .table import byte_level_table, keep_table

I64 = npt.NDArray[np.int64]
# from this many rows a message is looked up, below them looped: about where the two cost
# the same per row (`scripts/bench/stages.py --small-frames` and its traces measure both)
LOOKUP_MIN_ROWS = 32


def whole_char_texts(table: list[bytes], skip: list[bytes] | None = None
                     ) -> tuple[list[str | None], list[str | None]]:
    """Each id's text when its bytes are whole UTF-8 characters (None when not): a row of
    one such id, on a slot with nothing pending, is that text without a codec call. The
    two tables share the strings of the ids they agree on."""
    def text(b: bytes) -> str | None:
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return None

    kept = list(map(text, table))
    if skip is None:
        return kept, kept
    skipped = [t if a is b else text(b) for t, a, b in zip(kept, table, skip)]
    return kept, skipped


class ByteLoop:
    """The reference: every message's rows decoded one by one, in order."""

    def __init__(self, info: TokenizerInfo) -> None:
        tables = byte_level_table(info)
        assert tables is not None, "ByteLoop of a tokenizer that is not byte-level"
        self.info = info
        self.vocab = info.vocab_size
        # per id table (a slot's `table_sel`): specials kept, specials skipped, then one
        # per parser marker set kept visible while skipping (`start`'s `keep`)
        self.tables = [tables.kept, tables.skipped]
        # per table: the ids attribution makes zero-width (the skipped specials)
        self.drops: list[frozenset[int]] = [frozenset(), info.special_ids]
        self._kept: dict[frozenset[int], int] = {}

    @cached_property
    def strs(self) -> list[list[str | None]]:
        """Per id table, each id's text when its bytes are whole characters
        (`whole_char_texts`): made when first asked, by `decode` or by the vectorised
        implementation when it is built, so that a decoder that only pushes (a request's
        own, built alone) costs nothing to build."""
        kept, skipped = whole_char_texts(self.tables[0], self.tables[1])
        return [kept, skipped, *(whole_char_texts(t)[0] for t in self.tables[2:])]

    def start(self, opts: Open, keep: frozenset[int] = frozenset()) -> SlotStart:
        sel = self._table(keep) if keep and opts.skip_special_tokens else \
            1 if opts.skip_special_tokens else 0
        pending, skip = prompt_state(self.tables[sel], row_in_vocab(opts.prompt_ids, self.vocab))
        return SlotStart(pending, skip, True, sel)

    def _table(self, keep: frozenset[int]) -> int:
        """The skipping table with `keep` visible, added once per marker set."""
        sel = self._kept.get(keep)
        if sel is None:
            sel = self._kept[keep] = len(self.tables)
            table = keep_table(self.info, keep)
            self.tables.append(table)
            if "strs" in self.__dict__:  # made already: the new table's too
                self.strs.append(whole_char_texts(table)[0])
            self.drops.append(self.info.special_ids - keep)
        return sel

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        slots = rows.slots.tolist()
        heads = rows.meta.tolist()
        if not rows.distinct:  # a slot's rows share its numbers, which they advance in turn
            first: dict[int, list[int]] = {}
            heads = [first.setdefault(s, h) for s, h in zip(slots, heads)]
        row_ids = rows.row_ids()
        flat = None if row_ids is not None else rows.ids.tolist()
        texts, attrs = decode_loop(self.tables, self.vocab, state, slots, heads, row_ids, flat,
                                   self.strs, self.drops)
        return Decoded(texts, None, attrs, flat)

    def push(self, state: Slots, slot: int, ids: list[int]) -> str:
        head = state.meta[slot].tolist()
        table = self.tables[head[SEL]]
        if len(ids) == 1 and 0 <= ids[0] < self.vocab:
            return push(state, slot, head, table[ids[0]])
        return push(state, slot, head, b"".join([table[i] for i in row_in_vocab(ids, self.vocab)]))

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        return flush_held(state, at, slots)

    def attributor(self, state: Slots, slot: int) -> Attributor:
        return Attributor()

    def push_attributed(self, state: Slots, slot: int, ids: list[int], attr: Attributor) -> str:
        head = state.meta[slot].tolist()
        sel = head[SEL]
        return push_attributed(self.tables[sel], self.vocab, self.drops[sel], state, slot, head,
                               ids, attr)

    def flush_attributed(self, state: Slots, slot: int, attr: Attributor) -> str:
        _, extra = flush_held(state, [0], np.array([slot], np.int64))
        text = extra[0] if extra else ""
        if text:
            attr.produced(len(text))
        attr.end()
        return text


class ByteLookup(ByteLoop):
    """The vectorised implementation: messages of `min_rows` rows or more whose slots are
    distinct are looked up by id; the others take the reference loop."""

    def __init__(self, info: TokenizerInfo, min_rows: int = LOOKUP_MIN_ROWS) -> None:
        super().__init__(info)
        self.id_texts = IdTexts(self.tables, self.strs, info.special_ids)
        self.min_rows = min_rows

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        if not rows.distinct or len(rows.slots) < self.min_rows:
            return super().decode(state, rows)
        meta = rows.meta
        want = meta[:, ATTR].astype(bool) if state.attr_live else None
        if want is not None and want.any():
            texts, attrs = decode_attributed(self.id_texts, self.tables, self.vocab,
                                             self.drops, state, rows.slots, meta, want,
                                             rows.ids, rows.id_starts)
            return Decoded(texts, None, attrs)
        return Decoded(decode_mapped(self.id_texts, state, rows.slots, meta, rows.ids,
                                     rows.id_starts))
