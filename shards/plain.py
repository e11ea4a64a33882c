"""The array path's byte-level decoder: a message's plain rows decoded against their slots'
arrays, row by row in order as `decoder.ByteStream` does (the reference the tests hold it
to). The id lookup (shards/mapped.py) takes the messages whose slots are distinct; this
loop takes every other one (a slot named twice: rows of one request decode in order), and
a request's end.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from sglang_tok.shards.request import SENT_TAIL

from sglang_tok.decoder import ByteStream
from sglang_tok.protocol import Open
from sglang_tok.ragged import starts_of
from sglang_tok.tokenizer import TokenizerInfo

from .attributed import Attribution, attributed_push
from .mapped import IdTexts
from .slots import Slots

I64 = npt.NDArray[np.int64]
# below this many rows a message takes the loop (shards/small.py): where the loop and the
# whole-array code cost the same per row on trace a at 64 and 256 concurrent requests
ARRAY_MIN_ROWS = 128


class PlainTexts(NamedTuple):
    """The texts of a message's plain rows: row r's is text[chars[r]:chars[r + 1]]; `parts`
    holds them as strings when the loop made them anyway."""

    text: str
    chars: I64
    parts: list[str] | None
    data: bytes  # `text` as UTF-8
    # per row, its attributions (shards/attributed.py), None for a row whose request did
    # not ask; None when no row's did
    attrs: list[list[tuple[int, int, int]] | None] | None = None

    def char_lens(self) -> I64:
        return self.chars[1:] - self.chars[:-1]

    def with_suffixes(self, at: list[int], extra: list[str]) -> PlainTexts:
        """Row at[k]'s text followed by extra[k] (`at` ascending): a request's final flush,
        rare, so a copy of the text is fine."""
        c = self.chars.tolist()
        pieces: list[str] = []
        prev = 0
        for j, more in zip(at, extra):
            pieces += (self.text[prev:c[j + 1]], more)
            prev = c[j + 1]
        pieces.append(self.text[prev:])
        add = np.zeros(len(c) - 1, np.int64)
        add[at] = list(map(len, extra))
        chars = self.chars.copy()
        chars[1:] += np.cumsum(add)
        parts = None
        if self.parts is not None:
            parts = list(self.parts)
            for j, more in zip(at, extra):
                parts[j] += more
        text = "".join(pieces)
        return PlainTexts(text, chars, parts, text.encode(), self.attrs)

    def texts(self) -> list[str]:
        if self.parts is not None:
            return self.parts
        c = self.chars.tolist()
        return list(map(self.text.__getitem__, map(slice, c, c[1:])))


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


class PlainDecoder:
    """One tokenizer's byte tables, flat (array path) and as lists (the loop)."""

    def __init__(self, info: TokenizerInfo, min_rows: int = ARRAY_MIN_ROWS) -> None:
        assert info.byte_table is not None and info.byte_table_skip is not None
        self.vocab = info.vocab_size
        self.tables = (info.byte_table, info.byte_table_skip)
        self.strs = whole_char_texts(info.byte_table, info.byte_table_skip)
        self.id_texts = IdTexts(self.tables, self.strs, info.special_ids)
        self.min_rows = min_rows
        # per table: the ids attribution makes zero-width (the skipped specials)
        self.drops: tuple[frozenset[int], frozenset[int]] = (frozenset(), info.special_ids)

    def decode(self, state: Slots, slots: I64, ids: I64, id_starts: I64,
               distinct: bool = True) -> PlainTexts:
        """Decode rows (row r: ids[id_starts[r]:id_starts[r + 1]] for slot slots[r]) and
        advance their slots; ids in [0, vocab] (vocab: out of the vocabulary, no text)."""
        counts = id_starts[1:] - id_starts[:-1]
        if distinct:
            state.completion[slots] += counts
        else:
            np.add.at(state.completion, slots, counts)  # a slot named twice counts twice
        return self._loop(state, slots, ids, id_starts)

    def start(self, opts: Open) -> tuple[bytes, int, bool]:
        """(pending bytes, characters to pass over, text begun) after the request's prompt."""
        vocab = self.vocab
        table = self.tables[1 if opts.skip_special_tokens else 0]
        stream = ByteStream(table, [i if 0 <= i < vocab else vocab for i in opts.prompt_ids])
        return stream.pending, stream.skip, True

    def stream_of(self, state: Slots, slot: int) -> ByteStream:
        """The slot's state as a ByteStream, for the per-row end-of-request rules."""
        stream = ByteStream(self.tables[int(state.table_sel[slot])])
        stream.pending = state.pending[slot, :state.pend_len[slot]].tobytes()
        stream.skip = int(state.skip[slot])
        return stream

    def sent_tail(self, state: Slots, slot: int) -> str:
        """The last SENT_TAIL characters the slot sent, decoded again from its ring of ids
        (what `Request.tail` holds on the per-row path)."""
        ids, start = state.recent_ids(slot)
        table = self.tables[int(state.table_sel[slot])]
        data = b"".join([table[i] for i in ids])
        held = int(state.pend_len[slot])
        if start is not None:
            data = start[0] + data
        if held:
            data = data[:-held]  # not sent yet
        if start is None:  # the ring begins inside the text: from its first character
            lead = 0
            while lead < len(data) and data[lead] & 0xC0 == 0x80:
                lead += 1
            data = data[lead:]
        text = data.decode("utf-8", "replace")
        if start is not None and start[1]:
            text = text[start[1]:]
        return text[-SENT_TAIL:]

    def finish(self, state: Slots, slot: int, ids: list[int]) -> str:
        """A request's last ids: decoded after its pending bytes, then flushed (the codec's
        final rules for an incomplete character), as `ByteStream.push` + `flush` do."""
        vocab = self.vocab
        table = self.tables[int(state.table_sel[slot])]
        data = b"".join([table[i if 0 <= i < vocab else vocab] for i in ids])
        held = int(state.pend_len[slot])
        if held:
            data = state.pending[slot, :held].tobytes() + data
        text, _ = utf_8_decode(data, "replace", True)
        if state.skip[slot] and text:
            text = text[1:]
        return text

    def finish_attributed(self, state: Slots, slot: int, ids: list[int],
                          stop: int | None) -> tuple[str, list[Attribution]]:
        """`finish` with attribution, id by id as the per-row path does it (a small
        message's last rows): `ids` in the vocabulary or `vocab`, the trimmed stop token
        `stop` (its real id) left out of them."""
        sel, held = int(state.table_sel[slot]), int(state.pend_len[slot])
        text, _, _, got, _ = attributed_push(
            self.tables[sel], self.vocab, self.drops[sel], state.pending[slot, :held].tobytes(),
            int(state.skip[slot]), state.carry.pop(slot, None), ids, True, stop)
        return text, got

    def _loop(self, state: Slots, slots: I64, ids: I64, id_starts: I64) -> PlainTexts:
        """Row by row, in order, as `ByteStream.push` (the reference) does it."""
        slot_list = slots.tolist()
        sel, pend_len, skip = (state.table_sel[slots].tolist(), state.pend_len[slots].tolist(),
                               state.skip[slots].tolist())
        id_list, st = ids.tolist(), id_starts.tolist()
        tables, pending = self.tables, state.pending
        pend: dict[int, bytes] = {}  # slot -> pending bytes, as this message leaves them
        skips: dict[int, bool] = {}
        texts: list[str] = []
        want = state.attr[slots].tolist() if state.attr_live else None
        attrs: list[list[Attribution] | None] | None = \
            [None] * len(slot_list) if want is not None and any(want) else None
        for row, slot in enumerate(slot_list):
            table = tables[sel[row]]
            a, b = st[row], st[row + 1]
            held = pend.get(slot)
            if held is None:
                held = pending[slot, :pend_len[row]].tobytes() if pend_len[row] else b""
            if attrs is not None and want is not None and want[row]:  # id by id, exactly
                skip_now = skips.get(slot, skip[row])
                text, pend[slot], left_skip, attrs[row], left = attributed_push(
                    table, self.vocab, self.drops[sel[row]], held, int(skip_now),
                    state.carry.pop(slot, None), id_list[a:b])
                if left:
                    state.carry[slot] = left
                if skip_now and not left_skip:
                    skips[slot] = False
                texts.append(text)
                continue
            data = table[id_list[a]] if b - a == 1 else b"".join([table[x] for x in id_list[a:b]])
            if held:
                data = held + data
            text, used = utf_8_decode(data, "replace", False)
            pend[slot] = data[used:] if used != len(data) else b""
            if skips.get(slot, skip[row]) and text:
                text = text[1:]
                skips[slot] = False
            texts.append(text)
        for slot, data in pend.items():
            state.pend_len[slot] = len(data)
            if data:
                state.pending[slot, :len(data)] = np.frombuffer(data, np.uint8)
        for slot in skips:
            state.skip[slot] = False
        joined = "".join(texts)
        chars = starts_of(np.fromiter(map(len, texts), np.int64, len(texts)))
        return PlainTexts(joined, chars, texts, joined.encode(), attrs)
