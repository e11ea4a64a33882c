"""The one interface every array-path decoder has, whatever its tokenizer family.

A shard decodes a message's plain rows against their slots' state (shards/slots.py). How
depends only on the family: byte-level BPE (GPT-2, Llama-3, DeepSeek, Qwen: each id is a
run of bytes, shards/byte_level.py) or SentencePiece byte fallback (Llama-2, Mistral: runs
of <0xNN> ids decide their text as a whole, shards/byte_fallback.py). Each family has one
reference loop and at most one vectorised implementation of `decode`. The table
(shards/table.py) is written against this interface only; shards/decoders.py picks the
implementation per tokenizer, and tests hand the table the one they check, as vLLM's
detokenizer picks a backend once and uvicorn runs one suite over two HTTP
implementations. Other decoder chains (WordPiece) stay on the per-row path
(`decoder.WindowStream`).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from sglang_tok.decoder import Stream
from sglang_tok.protocol import Open

from .attributed import Attribution
from .slots import Slots

I64 = npt.NDArray[np.int64]
Attrs = list[list[Attribution] | None]


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


class RowDecoder(Protocol):
    """A tokenizer family's decoding of plain rows, from and into `Slots`."""

    def start(self, opts: Open) -> tuple[bytes, int, bool]:
        """(pending bytes, characters to pass over, text begun) after the request's prompt."""
        ...

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        """The rows' texts; their slots' pending bytes and characters to pass over advance
        (completion counts and rings of ids are the table's)."""
        ...

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        """Last rows (at[k] among the decoded rows, of slot slots[k]), decoded as running
        ones: (where, text) of what their slots still hold, by the codec's final rules; the
        slots hold nothing after."""
        ...

    def stream_of(self, state: Slots, slot: int) -> Stream:
        """The slot's state as a `decoder.Stream`, for the per-row end-of-request rules."""
        ...

    def sent_tail(self, state: Slots, slot: int) -> str:
        """The last characters the slot sent (`Request.tail` on the per-row path)."""
        ...
