"""Which decoders a tokenizer gets (the interface: shards/decoding/interface.py).

The one factory, a floor above the families it picks from: `decoders_for` gives a shard's
table, once, the array path's decoder and the per-row path's together. Byte-level BPE and
SentencePiece byte fallback have an array decoder (a reference and a vectorised
implementation each), which their per-row requests use too, so that a request keeps one
decoder whichever path it takes; every other tokenizer has none, all its requests take the
per-row path, with the window family's decoder (or, with no text, none at all). The table
takes what it is given (tests inject the implementation they check), and hands its
per-row decoder to each of its requests.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import TokenizerInfo

from .byte_fallback.decoder import FallbackArrays, FallbackLoop
from .byte_fallback.table import fallback_table
from .byte_level.decoder import ByteLookup, ByteLoop
from .byte_level.table import byte_level_table
from .decoding.attribution import Attributor
from .decoding.interface import Decoded, PlainRows, RowDecoder
from .decoding.slots import Slots, SlotStart
from .window.decoder import WindowDecoder

I64 = npt.NDArray[np.int64]


class Decoders(NamedTuple):
    """A tokenizer's decoders: the array path's (None: every request takes the per-row
    path) and the per-row path's (the array path's, where there is one)."""

    array: RowDecoder | None
    per_row: RowDecoder


def decoders_for(info: TokenizerInfo, vectorised: bool = True,
                 min_rows: int | None = None) -> Decoders:
    """This tokenizer's decoders, built afresh (their tables are read-only; a request's
    state lives in its slot): its family's vectorised implementation (for messages of
    `min_rows` rows or more, its own default if None), or with `vectorised=False` its
    reference loop."""
    array = _array_decoder(info, vectorised, min_rows)
    if array is not None:
        return Decoders(array, array)
    return Decoders(None, WindowDecoder(info) if info.has_text else NullDecoder())


def _array_decoder(info: TokenizerInfo, vectorised: bool,
                   min_rows: int | None) -> RowDecoder | None:
    if not info.has_text:
        return None
    # each family's own test, in order: byte-level BPE, then SentencePiece byte fallback
    if byte_level_table(info) is not None:
        if not vectorised:
            return ByteLoop(info)
        return ByteLookup(info) if min_rows is None else ByteLookup(info, min_rows)
    tab = fallback_table(info)
    if tab is None:
        return None
    if not vectorised:
        return FallbackLoop(tab)
    return FallbackArrays(tab) if min_rows is None else FallbackArrays(tab, min_rows)


def family_of(info: TokenizerInfo) -> str:
    """The family that decodes this tokenizer, by each family's own test in order (for the
    shard's log line)."""
    if not info.has_text:
        return "none"
    if byte_level_table(info) is not None:
        return "byte-level"
    return "byte-fallback" if fallback_table(info) is not None else "window"


def array_attributes(info: TokenizerInfo) -> bool:
    """Whether the array path attributes this tokenizer's ids: byte-level BPE only, whose
    ids' byte lengths give the anchors (shards/byte_level/attribution.py)."""
    return byte_level_table(info) is not None


class NullDecoder:
    """`--tokenizer none`: ids pass through, no text (SGLang's `Skip` backend)."""

    vocab = 2**63 - 1

    def start(self, opts: Open, keep: frozenset[int] = frozenset()) -> SlotStart:
        return SlotStart(b"", 0, False, 0)

    def decode(self, state: Slots, rows: PlainRows) -> Decoded:
        return Decoded([""] * len(rows.slots))

    def push(self, state: Slots, slot: int, ids: list[int]) -> str:
        return ""

    def flush(self, state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
        return [], []

    def attributor(self, state: Slots, slot: int) -> Attributor:
        return Attributor()

    def push_attributed(self, state: Slots, slot: int, ids: list[int], attr: Attributor) -> str:
        return ""

    def flush_attributed(self, state: Slots, slot: int, attr: Attributor) -> str:
        attr.end()
        return ""
