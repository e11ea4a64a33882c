"""The one interface every decoder has, whatever its tokenizer family.

A shard decodes every request against its slot's state (shards/decoding/slots.py), on both
paths: a message's plain rows together (`decode`, the array path) and a per-row request's
rows one at a time (`push`, for stop strings, parsers, attribution), so a request keeps one
decoder and one state from its first row to its last. How depends only on the family:
byte-level BPE (GPT-2, Llama-3, DeepSeek, Qwen: each id is a run of bytes,
shards/byte_level/decoder.py), SentencePiece byte fallback (Llama-2, Mistral: runs of
<0xNN> ids decide their text as a whole, shards/byte_fallback/decoder.py) and every other
decoder chain (WordPiece: a bounded window of ids through `tokenizers`' own decode,
shards/window/decoder.py). Each family has one reference implementation and at most one
vectorised one of `decode`; the per-row methods are the reference's. The families know
only this floor (shards/decoding/), never each other; shards/decoders.py, a floor above
them, picks one per tokenizer, once, as vLLM's detokenizer picks a backend, and its shard's
table takes what it picks; tests hand the table the one they check and run one suite over
each, as uvicorn runs one suite over its two HTTP implementations."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from sglang_tok.protocols.model.control import Open

from .attribution import Attributor
from .slots import Slots, SlotStart

I64 = npt.NDArray[np.int64]
Attribution = tuple[int, int, int]  # [token_id, kind, byte offset in the row's text]
Attrs = list[list[Attribution] | None]
Carry = list[tuple[int, int]]  # (token_id, kind) of a slot's entries still pending, in order


# ------------------------------------------------------------------ out-of-vocabulary ids
def in_vocab(ids: I64, vocab: int) -> I64:
    """Ids as the decoders take them: any id outside the vocabulary becomes `vocab`, which
    has no text (the full decode drops such an id). One reduction: as unsigned, a negative
    id is beyond any vocabulary too. The same array when every id is inside."""
    as_unsigned = ids.view(np.uint64)
    if len(ids) and np.maximum.reduce(as_unsigned) >= vocab:
        return np.where(as_unsigned >= vocab, vocab, ids)
    return ids


def row_in_vocab(ids: list[int], vocab: int) -> list[int]:
    """`in_vocab` for one row's list of ids (any Python int)."""
    if ids and (min(ids) < 0 or max(ids) >= vocab):
        return [i if 0 <= i < vocab else vocab for i in ids]
    return ids


# ------------------------------------------------------------------ what a decoder takes
class PlainRows(NamedTuple):
    """A message's plain rows as a decoder takes them: their message rows, slots and the
    slots' numbers (`Slots.meta`, read before), ids (in [0, vocab], stop tokens blanked) and
    the ids as they came (`sent`, for the output), per-row starts and counts (None: one id
    per row), whether each slot is named once, and whether these are the message's every
    row (nothing was gathered)."""

    rows: I64
    slots: I64
    meta: I64
    ids: I64
    sent: I64
    id_starts: I64 | None
    counts: I64 | None
    distinct: bool
    every: bool

    def row_ids(self) -> list[list[int]] | None:
        """Each row's ids as lists (None for one id per row)."""
        if self.id_starts is None:
            return None
        flat, cuts = self.ids.tolist(), self.id_starts.tolist()
        return list(map(flat.__getitem__, map(slice, cuts, cuts[1:])))


class Decoded:
    """A message's plain rows' texts as their decoder made them: a list, or (the
    byte-fallback arrays) one string with its character cuts and its UTF-8, so that PACKED
    output takes them as they are; the rows' attributions (None: no row asked); and the
    decoded ids as a list, if the decoder made one (the output writes them again)."""

    __slots__ = ("parts", "joined", "attrs", "id_list")

    def __init__(self, parts: list[str] | None, joined: tuple[str, I64, bytes] | None = None,
                 attrs: Attrs | None = None, id_list: list[int] | None = None) -> None:
        self.parts, self.joined, self.attrs, self.id_list = parts, joined, attrs, id_list

    def texts(self) -> list[str]:
        if self.parts is None:
            assert self.joined is not None
            text, chars, _ = self.joined
            c = chars.tolist()
            self.parts = list(map(text.__getitem__, map(slice, c, c[1:])))
        return self.parts

    def text_of(self, j: int) -> str:
        """Row j's text, without making the list of every row's."""
        if self.parts is None:
            assert self.joined is not None
            text, chars, _ = self.joined
            return text[int(chars[j]):int(chars[j + 1])]
        return self.parts[j]

    def packed(self) -> tuple[bytes, list[int] | I64]:
        """Every row's text as one UTF-8 buffer, and each row's length in characters."""
        if self.joined is not None:
            _, chars, data = self.joined
            return data, chars[1:] - chars[:-1]
        texts = self.texts()
        return "".join(texts).encode(), list(map(len, texts))

    def add(self, at: list[int], extra: list[str]) -> None:
        """Row at[k]'s text followed by extra[k]: a request's final flush (rare)."""
        texts = self.texts()
        for j, more in zip(at, extra):
            texts[j] += more
        self.joined = None

    def set(self, j: int, text: str) -> None:
        """Row j's text becomes `text` (a request's end: rare)."""
        self.texts()[j] = text
        self.joined = None


class RowDecoder(Protocol):
    """A tokenizer family's decoding, from and into `Slots`, on both paths."""

    vocab: int

    def start(self, opts: Open, keep: frozenset[int] = frozenset()) -> SlotStart:
        """The slot's state after the request's prompt (`keep`: specials a parser must see
        although the request skips special tokens)."""
        ...

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        """A message's plain rows' texts; their slots' state advances (completion counts
        are the table's)."""
        ...

    def push(self, state: Slots, slot: int, ids: list[int]) -> str:
        """One row of a per-row request (ids any int): its text; the slot's state advances."""
        ...

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        """Last rows (at[k] among the decoded rows, of slot slots[k]): (where, text) of what
        their slots still hold, by the codec's final rules; the slots hold nothing after."""
        ...

    def attributor(self, state: Slots, slot: int) -> Attributor:
        """A per-row request's attribution state, for this family's rule."""
        ...

    def push_attributed(self, state: Slots, slot: int, ids: list[int], attr: Attributor) -> str:
        """`push`, each id attributed by this family's rule as its text comes; ids in
        [0, vocab_size] (the request maps them: an attribution names the id decoded)."""
        ...

    def flush_attributed(self, state: Slots, slot: int, attr: Attributor) -> str:
        """`flush` for one slot, placing the ids still pending; `attr` then ends."""
        ...
