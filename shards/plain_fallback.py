"""The array path for SentencePiece byte-fallback tokenizers (Llama-2, Mistral, Gemma).

The same interface as `plain.PlainDecoder` (the byte-level one), over the same per-slot
arrays: a slot's `pending` bytes are its open byte run (any length: the arrays widen),
`skip` counts the characters of a prompt's run still to pass over, and `started` says
whether the request's text has begun (the decoder's leading-space strip is then spent).
The decoding itself is `fallback_decode` (whole arrays, or its loop for small messages).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from sglang_tok.shards.request import SENT_TAIL

from sglang_tok.protocol import Open
from sglang_tok.ragged import ragged_index
from sglang_tok.tokenizer import TokenizerInfo

from .fallback_decode import (
    TEXT,
    FallbackDecoded,
    FallbackTable,
    decode_rows_fallback,
    decode_rows_loop,
    fallback_table,
    finish,
    prompt_state,
)
from .plain import ARRAY_MIN_ROWS, PlainTexts
from .slots import Slots

I64 = npt.NDArray[np.int64]


class FallbackStream:
    """A slot's state as a `decoder.Stream`, for the per-row end-of-request rules (a
    scheduler-matched stop string, ERROR, ABORT) of a request that was on the array path."""

    __slots__ = ("tab", "sel", "run", "started", "skip")

    def __init__(self, tab: FallbackTable, sel: int, run: bytes, started: bool,
                 skip: int) -> None:
        self.tab, self.sel, self.run, self.started, self.skip = tab, sel, run, started, skip

    def push(self, ids: list[int]) -> str:
        stride = self.tab.stride
        safe = np.array([i if 0 <= i < stride - 1 else stride - 1 for i in ids], np.int64)
        run = np.frombuffer(self.run, np.uint8).reshape(1, -1) if self.run else \
            np.zeros((1, 1), np.uint8)
        decoded = decode_rows_loop(self.tab, safe, np.array([0, len(ids)], np.int64),
                                   np.array([self.sel], np.int64), run,
                                   np.array([len(self.run)], np.int64),
                                   np.array([self.started], bool), np.array([self.skip], np.int64))
        self.run = decoded.held_data.tobytes()
        self.started, self.skip = bool(decoded.started[0]), int(decoded.skip[0])
        return decoded.text

    def push_one(self, tid: int) -> str:
        return self.push([tid])

    def flush(self) -> str:
        text = finish(self.tab, self.run, self.started, self.skip)
        self.run, self.skip = b"", 0
        return text


class FallbackPlainDecoder:
    def __init__(self, tab: FallbackTable, info: TokenizerInfo,
                 min_rows: int = ARRAY_MIN_ROWS) -> None:
        self.tab = tab
        self.vocab = info.vocab_size
        self.min_rows = min_rows

    @classmethod
    def of(cls, info: TokenizerInfo, min_rows: int = ARRAY_MIN_ROWS) -> FallbackPlainDecoder | None:
        tab = fallback_table(info)
        return None if tab is None else cls(tab, info, min_rows)

    def start(self, opts: Open) -> tuple[bytes, int, bool]:
        """(open run, characters to pass over, text begun) after the request's prompt."""
        st = prompt_state(self.tab, opts.prompt_ids, opts.skip_special_tokens)
        return st.run, st.skip, st.started

    def stream_of(self, state: Slots, slot: int) -> FallbackStream:
        return FallbackStream(self.tab, int(state.table_sel[slot]),
                              state.pending[slot, :state.pend_len[slot]].tobytes(),
                              bool(state.started[slot]), int(state.skip[slot]))

    def sent_tail(self, state: Slots, slot: int) -> str:
        """The last SENT_TAIL characters the slot sent, decoded again from its ring of ids
        (what `Request.tail` holds on the per-row path)."""
        ids, start = state.recent_ids(slot)
        sel = int(state.table_sel[slot])
        if start is None:  # the ring begins inside the text: from its first text id
            base, kinds = sel * self.tab.stride, self.tab.kinds
            first = next((k for k, i in enumerate(ids) if kinds[base + i] == TEXT), len(ids))
            stream = FallbackStream(self.tab, sel, b"", True, 0)
            ids = ids[first:]
        else:
            run, skip, started = start
            stream = FallbackStream(self.tab, sel, run, started, skip)
        return stream.push(ids)[-SENT_TAIL:]  # the open run at the end is held: not sent

    def finish(self, state: Slots, slot: int, ids: list[int]) -> str:
        stream = self.stream_of(state, slot)
        return stream.push(ids) + stream.flush()

    def decode(self, state: Slots, slots: I64, ids: I64, id_starts: I64,
               distinct: bool = True) -> PlainTexts:
        """As `PlainDecoder.decode`; ids in [0, vocab] (vocab: out of the vocabulary)."""
        counts = id_starts[1:] - id_starts[:-1]
        if not distinct:  # rows of one slot, in order
            return self._one_by_one(state, slots, ids, id_starts)
        state.completion[slots] += counts
        args = (self.tab, ids, id_starts, state.table_sel[slots], state.pending[slots],
                state.pend_len[slots], state.started[slots].astype(bool), state.skip[slots])
        decoded = decode_rows_fallback(*args) if len(slots) >= self.min_rows else \
            decode_rows_loop(*args)
        self._store(state, slots, decoded)
        return PlainTexts(decoded.text, decoded.chars, decoded.parts, decoded.buf.tobytes())

    def _store(self, state: Slots, slots: I64, decoded: FallbackDecoded) -> None:
        state.started[slots] = decoded.started
        state.skip[slots] = decoded.skip
        state.pend_len[slots] = decoded.held
        if len(decoded.held_data):
            state.widen(int(decoded.held.max()))
            rows = np.flatnonzero(decoded.held)
            dest = ragged_index(slots[rows] * state.pending.shape[1], decoded.held[rows])
            state.pending.reshape(-1)[dest] = decoded.held_data

    def _one_by_one(self, state: Slots, slots: I64, ids: I64, id_starts: I64) -> PlainTexts:
        texts: list[str] = []
        for row in range(len(slots)):
            one = slots[row:row + 1]
            id_from, id_to = int(id_starts[row]), int(id_starts[row + 1])
            texts.append(self.decode(state, one, ids[id_from:id_to],
                                     np.array([0, id_to - id_from], np.int64), True).text)
        joined = "".join(texts)
        chars = np.concatenate(([0], np.cumsum([len(t) for t in texts]))).astype(np.int64)
        return PlainTexts(joined, chars, texts, joined.encode())
