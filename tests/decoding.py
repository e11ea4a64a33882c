"""The array path's decoder implementations, for tests that run one suite over each.

Each tokenizer family has a reference loop and a vectorised implementation
(shards/decoders.py); a test injects the one it checks into its `RidTable`. The
vectorised one is forced onto every message it can take (`min_rows` 1); "mixed" loops
below 3 rows and is vectorised from 3, so that one request's rows meet both.
"""

from __future__ import annotations

import functools
from typing import Any

from sglang_tok.shards.decoders import decoder_for
from sglang_tok.shards.row_decoder import RowDecoder
from sglang_tok.shards.table import RidTable

from sglang_tok.testing import zoo
from sglang_tok.tokenizer import TokenizerInfo, describe, load

TEXTS = ["héllo wörld 你好世界 🙂👩‍👩‍👧 ", "plain ascii text here. ", "日本語のテキスト",
         "emoji 🏳️‍🌈❤️‍🔥 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"]


@functools.cache
def tokenizer(name: str) -> TokenizerInfo:
    """The built-in tokenizer, or a small trained one of each array-path family."""
    if name == "deepseek-v4":
        return load(name)
    return describe({"trained-bpe": zoo.byte_level_bpe,
                     "llama2-style": zoo.metaspace_byte_fallback_bpe,
                     "unigram-fallback": zoo.unigram_byte_fallback}[name](), name)


# name -> (vectorised, min_rows)
IMPLEMENTATIONS: dict[str, tuple[bool, int | None]] = {
    "reference": (False, None), "vectorised": (True, 1)}
MIXED = {**IMPLEMENTATIONS, "mixed": (True, 3)}

_made: dict[tuple[int, bool, int | None], tuple[TokenizerInfo, RowDecoder | None]] = {}


def cached_decoder(info: TokenizerInfo, vectorised: bool = True,
                   min_rows: int | None = None) -> RowDecoder | None:
    """`decoder_for`, built once per tokenizer and implementation (a decoder's tables are
    read-only: the requests' state lives in each table's Slots)."""
    key = (id(info), vectorised, min_rows)
    if key not in _made:
        _made[key] = (info, decoder_for(info, vectorised, min_rows))  # info keeps its id
    return _made[key][1]


def table_on(info: TokenizerInfo, implementation: str, shard: int = 0, **kw: Any) -> RidTable:
    """A shard's table whose plain rows take this implementation (`MIXED`'s names)."""
    vectorised, min_rows = MIXED[implementation]
    return RidTable(info, shard, decoder=cached_decoder(info, vectorised, min_rows) or False,
                    **kw)
