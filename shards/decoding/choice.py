"""Which decoder a tokenizer gets, once (the interface: shards/decoding/interface.py).

`decoder_for` gives the array path its decoder: byte-level BPE and SentencePiece byte
fallback have one (a reference and a vectorised implementation each); every other
tokenizer has none, and all its requests take the per-row path. `family_for` gives every
tokenizer the decoder its per-row requests use when the shard has no array decoder (the
window family, or no text at all); with one, a shard's per-row requests use it too.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sglang_tok.protocols.native.control import Open
from sglang_tok.tokenizer import TokenizerInfo

from ..byte_fallback.decoder import FallbackArrays, FallbackLoop
from ..byte_fallback.table import fallback_table
from ..byte_level.decoder import ByteLookup, ByteLoop
from ..window.decoder import WindowDecoder
from .attribution import Attributor
from .interface import Decoded, PlainRows, RowDecoder
from .slots import Slots, SlotStart

I64 = npt.NDArray[np.int64]


def decoder_for(info: TokenizerInfo, vectorised: bool = True,
                min_rows: int | None = None) -> RowDecoder | None:
    """The array path's decoder for this tokenizer (None: every request per row): its
    family's vectorised implementation (for messages of `min_rows` rows or more, its own
    default if None), or with `vectorised=False` its reference loop."""

    if not info.has_text:
        return None
    if info.byte_table is not None:
        if not vectorised:
            return ByteLoop(info)
        return ByteLookup(info) if min_rows is None else ByteLookup(info, min_rows)
    tab = fallback_table(info)
    if tab is None:
        return None
    if not vectorised:
        return FallbackLoop(tab)
    return FallbackArrays(tab) if min_rows is None else FallbackArrays(tab, min_rows)


_FAMILIES: dict[int, tuple[TokenizerInfo, RowDecoder]] = {}


def family_for(info: TokenizerInfo) -> RowDecoder:
    """Any tokenizer's decoder for per-row requests, built once per tokenizer (its tables
    are read-only; a request's state lives in its slot): the array path's, else the
    window's, or with no text none at all."""
    key = id(info)
    if key not in _FAMILIES:
        dec = decoder_for(info) or (WindowDecoder(info) if info.has_text else NullDecoder())
        _FAMILIES[key] = (info, dec)  # info keeps its id
    return _FAMILIES[key][1]


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
