"""Every other decoder chain (WordPiece, Metaspace without byte fallback...): a window.

Exact incremental decoding for any `tokenizers` decoder pipeline: a slot keeps a bounded
window of its recent ids (`Window`, in `Slots.windows`), decodes it with `tokenizers`'
own `decode`, and slides it only where the decode of the shorter window is a suffix of
the longer one, so work per row is bounded by the window, never by the request's history.
Contract (protocol section 5, rule 2): for prompt P and pushed ids I, everything a slot's
rows and its flush return concatenates to `decode(P + I)[len(decode(P)):]`; text once
returned is never revised, and no returned text ends in a U+FFFD the full decode would not
have.

Held text: `tokenizers`' ByteFallback decoder turns a run of <0xNN> ids into text only as a
whole (valid UTF-8, or one U+FFFD per byte), so a character completed inside a run can
still become U+FFFD if the run ends mid-character. An open run is therefore held until a
non-byte id (or the end) closes it; everything before it is released at once. Such runs are
attributed by the byte-run rule (shards/decoding/runs.py).

There is one implementation, the reference; its tokenizers take the per-row path only
(shards/decoders.py gives them no array decoder).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import TokenizerInfo

from ..decoding.attribution import Attributor
from ..decoding.interface import Decoded, PlainRows
from ..decoding.runs import BYTE_ID, DROPPED, OUTSIDE, TEXT_ID, RunAttributor
from ..decoding.slots import Slots, SlotStart

I64 = npt.NDArray[np.int64]
# a window keeps at least CONTEXT ids behind the emission point and slides once it reaches
# SLIDE_AT ids: decode cost per row is O(SLIDE_AT), amortised
CONTEXT = 6
SLIDE_AT = 24


class Window:
    """A slot's window: its ids (none dropped), how many characters of their decode are
    sent or the prompt's (`emitted`), and the ids its request drops (skipped specials)."""

    __slots__ = ("ids", "emitted", "drop")

    def __init__(self, drop: frozenset[int]) -> None:
        self.ids: list[int] = []
        self.emitted = 0
        self.drop = drop


class WindowDecoder:
    """The window family's decoder (the reference, and the only implementation)."""

    def __init__(self, info: TokenizerInfo) -> None:
        tok = info.tokenizer
        self.decode_ids = lambda ids: tok.decode(ids, skip_special_tokens=False)
        self.vocab = info.vocab_size
        self.specials = info.special_ids
        self.bytes = info.byte_fallback_ids
        self.byte_values = info.byte_values
        # without byte runs, a trailing U+FFFD (a decoder's partial character) is held
        self.hold_fffd = not self.bytes

    def start(self, opts: Open, keep: frozenset[int] = frozenset()) -> SlotStart:
        # `keep`: specials a parser must see (parsers.marker_token_ids), never dropped
        drop = (self.specials - keep if keep else self.specials) if opts.skip_special_tokens \
            else frozenset()
        w = Window(drop)
        ids = w.ids = self._kept(w, opts.prompt_ids)
        text = self.decode_ids(ids) if ids else ""
        w.emitted = len(text)
        if len(ids) >= SLIDE_AT:
            self._slide(w, text, len(ids))
        return SlotStart(b"", 0, bool(text), 0, w)

    def _kept(self, w: Window, ids: list[int]) -> list[int]:
        # `decode` drops these ids before its decoder runs; dropping them here keeps the
        # byte-run test looking at what the decoder sees
        vocab, drop = self.vocab, w.drop
        return [i for i in ids if 0 <= i < vocab and i not in drop]

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        """A message's rows one by one, in order (no tokenizer of this family is on the
        array path: the interface's form of `push`)."""
        slots = rows.slots.tolist()
        row_ids = rows.row_ids() or [[i] for i in rows.ids.tolist()]
        return Decoded([self.push(state, s, ids) for s, ids in zip(slots, row_ids)])

    def push(self, state: Slots, slot: int, ids: list[int]) -> str:
        w = state.windows[slot]
        kept = self._kept(w, ids)
        if not kept:
            return ""
        all_ids = w.ids
        all_ids.extend(kept)
        byte_ids = self.bytes
        if kept[-1] not in byte_ids:
            return self._release(w, len(all_ids))
        # an open ByteFallback run: hold it, release the ids before it (rows of several ids)
        j = len(kept) - 1
        while j and kept[j - 1] in byte_ids:
            j -= 1
        return self._release(w, len(all_ids) - len(kept) + j) if j else ""

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        extra_at: list[int] = []
        extra: list[str] = []
        for k, slot in zip(at, slots.tolist()):
            text = self._flush(state.windows[slot])
            if text:
                extra_at.append(k)
                extra.append(text)
        return extra_at, extra

    def _flush(self, w: Window) -> str:
        if not w.ids:
            return ""
        text = self.decode_ids(w.ids)
        out = text[w.emitted:]
        w.emitted = len(text)
        return out

    def _release(self, w: Window, end: int) -> str:
        """Emit decode(ids[:end]) past what was emitted; ids[:end] ends outside any byte run."""
        ids = w.ids
        text = self.decode_ids(ids if end == len(ids) else ids[:end])
        stop = len(text)
        if self.hold_fffd:
            while stop > w.emitted and text[stop - 1] == "\ufffd":
                stop -= 1
        out = ""
        if stop > w.emitted:
            out = text[w.emitted:stop]
            w.emitted = stop
        if end >= SLIDE_AT:
            self._slide(w, text, end)
        return out

    def _slide(self, w: Window, text: str, end: int) -> None:
        """Drop the window's front where decode(ids[cut:end]) is a suffix of `text`.

        `text` is decode(ids[:end]); ids past `end` (an open byte run) stay in the window.
        """
        ids = w.ids
        cut = end - CONTEXT
        byte_ids = self.bytes
        while cut > 0 and ids[cut] in byte_ids and ids[cut - 1] in byte_ids:
            cut -= 1
        if cut <= 0:
            return
        tail = self.decode_ids(ids[cut:end])
        shift = len(text) - len(tail)
        # only where the short window's text is a suffix of the long one's, and the
        # dropped part lies wholly behind what was emitted
        if shift >= 0 and text.endswith(tail) and w.emitted >= shift:
            del ids[:cut]
            w.emitted -= shift

    # ------------------------------------------------------------------ attribution
    def attributor(self, state: Slots, slot: int) -> Attributor:
        ids, byte_ids = state.windows[slot].ids, self.bytes
        nb = 0
        while nb < len(ids) and ids[-1 - nb] in byte_ids:
            nb += 1
        return RunAttributor(nb)

    def push_attributed(self, state: Slots, slot: int, ids: list[int], attr: Attributor) -> str:
        assert isinstance(attr, RunAttributor)
        return attr.push(ids, _WindowRun(self, state.windows[slot]))

    def flush_attributed(self, state: Slots, slot: int, attr: Attributor) -> str:
        assert isinstance(attr, RunAttributor)
        return attr.flush(_WindowRun(self, state.windows[slot]))


class _WindowRun:
    """A slot's window, as the run rule sees it (`runs.RunOps`)."""

    __slots__ = ("dec", "w")

    def __init__(self, dec: WindowDecoder, w: Window) -> None:
        self.dec, self.w = dec, w

    def kind(self, tid: int) -> int:
        if tid in self.w.drop:
            return DROPPED
        if not 0 <= tid < self.dec.vocab:
            return OUTSIDE
        return BYTE_ID if tid in self.dec.bytes else TEXT_ID

    def byte(self, tid: int) -> None:
        self.w.ids.append(tid)

    def text(self, tid: int) -> str:
        ids = self.w.ids
        ids.append(tid)
        return self.dec._release(self.w, len(ids))

    def run(self, nb: int) -> bytes:
        ids, values = self.w.ids, self.dec.byte_values
        return bytes([values[i] for i in ids[len(ids) - nb:]])

    def start_text(self) -> str | None:
        # at the text's start a decoder may strip the run's leading space: ask it
        return None if self.w.emitted else self.dec.decode_ids(self.w.ids)

    def flush(self) -> str:
        return self.dec._flush(self.w)
