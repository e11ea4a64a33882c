"""Which array-path decoder a tokenizer gets (the interface: shards/row_decoder.py)."""

from __future__ import annotations

from sglang_tok.tokenizer import TokenizerInfo

from .byte_fallback import FallbackArrays, FallbackLoop
from .byte_level import ByteLookup, ByteLoop
from .fallback_decode import fallback_table
from .row_decoder import RowDecoder


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
