"""Byte-level BPE on the array path: the reference loop and the id lookup, one interface.

A byte-level id is a fixed run of bytes, so a slot's whole state is the bytes of an
incomplete character it holds and, after a prompt that ended inside one, a character to
pass over (`decoder.ByteStream`'s `pending` and `skip`). `ByteLoop` decodes a message's
rows one by one (shards/byte_rows.py); `ByteLookup` looks the rows up by their ids'
texts (shards/mapped.py) when the message is large enough to pay for its fixed cost in
numpy calls and names each slot once, and leaves every other message to the loop.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sglang_tok.decoder import ByteStream
from sglang_tok.protocol import Open
from sglang_tok.tokenizer import TokenizerInfo

from .byte_rows import decode_loop
from .ending import flush_held
from .mapped import IdTexts, decode_attributed, decode_mapped
from .row_decoder import Decoded, PlainRows, SlotStart, row_in_vocab
from .slots import ATTR, Slots

I64 = npt.NDArray[np.int64]
# from this many rows a message is looked up, below them looped: about where the two cost
# the same per row (`scripts/bench_stages.py --small-frames` and its traces measure both)
LOOKUP_MIN_ROWS = 32


def whole_char_texts(table: list[bytes], skip: list[bytes]
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
    skipped = [t if a is b else text(b) for t, a, b in zip(kept, table, skip)]
    return kept, skipped


class ByteLoop:
    """The reference: every message's rows decoded one by one, in order."""

    def __init__(self, info: TokenizerInfo) -> None:
        assert info.byte_table is not None and info.byte_table_skip is not None
        self.vocab = info.vocab_size
        self.tables = (info.byte_table, info.byte_table_skip)
        self.strs = whole_char_texts(info.byte_table, info.byte_table_skip)
        # per table: the ids attribution makes zero-width (the skipped specials)
        self.drops: tuple[frozenset[int], frozenset[int]] = (frozenset(), info.special_ids)

    def start(self, opts: Open, keep: frozenset[int] = frozenset()) -> SlotStart:
        sel = 1 if opts.skip_special_tokens else 0
        stream = ByteStream(self.tables[sel], row_in_vocab(opts.prompt_ids, self.vocab))
        return SlotStart(stream.pending, stream.skip, True, sel)

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

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        return flush_held(state, at, slots)

    def stream_of(self, state: Slots, slot: int) -> ByteStream:
        stream = ByteStream(self.tables[int(state.table_sel[slot])])
        stream.pending = state.pending[slot, :state.pend_len[slot]].tobytes()
        stream.skip = int(state.skip[slot])
        return stream


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
