"""SentencePiece byte fallback (Llama-2, Mistral, Gemma): one interface, both paths.

Over the same per-slot arrays as byte-level BPE: a slot's `pending` bytes are its open byte
run (any length: the arrays widen), `skip` counts the characters of a prompt's run still to
pass over, and `started` says whether the request's text has begun (the decoder's
leading-space strip is then spent). One codec step advances them (`rows.step`).
`FallbackLoop` is the reference: a message's rows one at a time (`decode_rows_loop`), and a
per-row request's rows as they come, attributed by the byte-run rule
(shards/decoding/runs.py, through `FallbackRun`) when the request asks; `FallbackArrays` the
vectorised implementation (`decode_rows_fallback`) for messages of `min_rows` rows or more.
Both take a message that names a slot twice one row at a time, in order."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sglang_tok.protocols.model.control import Open
from sglang_tok.ragged import ragged_index

from ..decoding.attribution import Attributor
from ..decoding.interface import Decoded, PlainRows, row_in_vocab
from ..decoding.runs import BYTE_ID, DROPPED, OUTSIDE, TEXT_ID, RunAttributor
from ..decoding.slots import PEND, SEL, SKIP, STARTED, Slots, SlotStart
from .codec import (
    FallbackDecoded,
    decode_rows_fallback,
    decode_rows_loop,
    finish,
    prompt_state,
    step,
)
from .table import BYTE, TEXT, FallbackTable, with_kept

I64 = npt.NDArray[np.int64]


# from this many rows a message takes the arrays: about where they and the loop cost the
# same per row (`scripts/bench/fallback.py` measures both)
ARRAYS_MIN_ROWS = 128


class FallbackLoop:
    """The reference: every message's rows decoded one by one."""

    def __init__(self, tab: FallbackTable) -> None:
        self.tab = tab
        self.vocab = tab.stride - 1
        self._kept: dict[frozenset[int], int] = {}

    def start(self, opts: Open, keep: frozenset[int] = frozenset()) -> SlotStart:
        sel = 1 if opts.skip_special_tokens else 0
        if keep and sel:  # the skipping table with a parser's markers kept, once per set
            if keep not in self._kept:
                self._kept[keep] = with_kept(self.tab, keep)
            sel = self._kept[keep]
        st = prompt_state(self.tab, opts.prompt_ids, sel)
        return SlotStart(st.run, st.skip, st.started, sel)

    def push(self, state: Slots, slot: int, ids: list[int]) -> str:
        sel, held, skip, started = state.meta[slot, [SEL, PEND, SKIP, STARTED]].tolist()
        run = state.pending[slot, :held].tobytes() if held else b""
        text, run, begun, left = step(self.tab, sel * self.tab.stride,
                                      row_in_vocab(ids, self.vocab), run, bool(started), skip)
        if len(run) != held or run:
            state.widen(len(run))
            state.pending[slot, :len(run)] = np.frombuffer(run, np.uint8)
            state.pend_len[slot] = len(run)
        if begun != started or left != skip:
            state.started[slot], state.skip[slot] = begun, left
        return text

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        slots, ids = rows.slots, rows.ids
        id_starts = rows.id_starts if rows.id_starts is not None else \
            np.arange(len(slots) + 1, dtype=np.int64)
        if not rows.distinct:  # rows of one slot, in order: one at a time
            return Decoded([self._rows(state, slots[r:r + 1], ids[id_starts[r]:id_starts[r + 1]],
                                       id_starts[r:r + 2] - id_starts[r]).text
                            for r in range(len(slots))])
        decoded = self._rows(state, slots, ids, id_starts)
        if decoded.parts is not None:
            return Decoded(decoded.parts)
        return Decoded(None, (decoded.text, decoded.chars, decoded.buf.tobytes()))

    def _rows(self, state: Slots, slots: I64, ids: I64, id_starts: I64) -> FallbackDecoded:
        decoded = self._decode(self.tab, ids, id_starts, state.table_sel[slots],
                               state.pending[slots], state.pend_len[slots],
                               state.started[slots].astype(bool), state.skip[slots])
        state.started[slots] = decoded.started
        state.skip[slots] = decoded.skip
        state.pend_len[slots] = decoded.held
        if len(decoded.held_data):
            state.widen(int(decoded.held.max()))
            held = np.flatnonzero(decoded.held)
            dest = ragged_index(slots[held] * state.pending.shape[1], decoded.held[held])
            state.pending.reshape(-1)[dest] = decoded.held_data
        return decoded

    def _decode(self, tab: FallbackTable, ids: I64, id_starts: I64, table_sel: I64,
                run_bytes: npt.NDArray[np.uint8], run_len: I64, started: npt.NDArray[np.bool_],
                skip: I64) -> FallbackDecoded:
        return decode_rows_loop(tab, ids, id_starts, table_sel, run_bytes, run_len, started,
                                skip)

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        """A held run's text by ByteFallback's rule for a run the end closes."""
        extra_at: list[int] = []
        extra: list[str] = []
        held_all = state.pend_len[slots]
        holding = np.flatnonzero(held_all)
        for k, slot, held in zip(holding.tolist(), slots[holding].tolist(),
                                 held_all[holding].tolist()):
            text = finish(self.tab, state.pending[slot, :held].tobytes(),
                          bool(state.started[slot]), int(state.skip[slot]))
            state.pend_len[slot] = state.skip[slot] = 0
            if text:
                extra_at.append(at[k])
                extra.append(text)
        return extra_at, extra

    def attributor(self, state: Slots, slot: int) -> Attributor:
        return RunAttributor(int(state.pend_len[slot]))

    def push_attributed(self, state: Slots, slot: int, ids: list[int], attr: Attributor) -> str:
        assert isinstance(attr, RunAttributor)
        return attr.push(ids, FallbackRun(self, state, slot))

    def flush_attributed(self, state: Slots, slot: int, attr: Attributor) -> str:
        assert isinstance(attr, RunAttributor)
        return attr.flush(FallbackRun(self, state, slot))


class FallbackArrays(FallbackLoop):
    """The vectorised implementation: a message's rows in a fixed number of numpy calls."""

    def __init__(self, tab: FallbackTable, min_rows: int = ARRAYS_MIN_ROWS) -> None:
        super().__init__(tab)
        self.min_rows = min_rows

    def _decode(self, tab: FallbackTable, ids: I64, id_starts: I64, table_sel: I64,
                run_bytes: npt.NDArray[np.uint8], run_len: I64, started: npt.NDArray[np.bool_],
                skip: I64) -> FallbackDecoded:
        call = decode_rows_fallback if len(table_sel) >= self.min_rows else decode_rows_loop
        return call(tab, ids, id_starts, table_sel, run_bytes, run_len, started, skip)


class FallbackRun:
    """A slot of a byte-fallback tokenizer, as the byte-run rule sees it (`runs.RunOps`)."""

    __slots__ = ("dec", "state", "slot")

    def __init__(self, dec: FallbackLoop, state: Slots, slot: int) -> None:
        self.dec, self.state, self.slot = dec, state, slot

    def kind(self, tid: int) -> int:
        dec = self.dec
        if not 0 <= tid < dec.vocab:
            return OUTSIDE
        kind = dec.tab.kinds[int(self.state.table_sel[self.slot]) * dec.tab.stride + tid]
        return TEXT_ID if kind == TEXT else BYTE_ID if kind == BYTE else DROPPED

    def byte(self, tid: int) -> None:
        self.dec.push(self.state, self.slot, [tid])

    def text(self, tid: int) -> str:
        return self.dec.push(self.state, self.slot, [tid])

    def run(self, nb: int) -> bytes:
        return self.state.held(self.slot)[-nb:]

    def start_text(self) -> str | None:
        state, slot = self.state, self.slot
        if state.started[slot]:
            return None
        return finish(self.dec.tab, state.held(slot), False, 0)

    def flush(self) -> str:
        _, extra = self.dec.flush(self.state, [0], np.array([self.slot], np.int64))
        return extra[0] if extra else ""
