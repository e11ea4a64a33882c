"""The array path's decoder implementations, for tests that run one suite over each.

Each tokenizer family has a reference loop and a vectorised implementation
(shards/decoders.py); a test injects the one it checks into its `RidTable`. The
vectorised one is forced onto every message it can take (`min_rows` 1); "mixed" loops
below 3 rows and is vectorised from 3, so that one request's rows meet both. A tokenizer's
decoders are built once per test session and implementation (`cached_decoders`), and
injected into every table and request that a test makes here.
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import TokenizerInfo, describe, load
from sglang_tok_testkit import zoo
from shards.decoders import Decoders, decoders_for
from shards.decoding.interface import RowDecoder
from shards.decoding.slots import Slots
from shards.messages.table import RidTable

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

_made: dict[tuple[int, bool, int | None], tuple[TokenizerInfo, Decoders]] = {}


def cached_decoders(info: TokenizerInfo, vectorised: bool = True,
                    min_rows: int | None = None) -> Decoders:
    """`decoders_for`, built once per tokenizer and implementation (a decoder's tables are
    read-only: the requests' state lives in each table's Slots), since a property test
    makes fresh tables for every example."""
    key = (id(info), vectorised, min_rows)
    if key not in _made:
        _made[key] = (info, decoders_for(info, vectorised, min_rows))  # info keeps its id
    return _made[key][1]


def table_on(info: TokenizerInfo, implementation: str, shard: int = 0, **kw: Any) -> RidTable:
    """A shard's table whose plain rows take this implementation (`MIXED`'s names)."""
    vectorised, min_rows = MIXED[implementation]
    return RidTable(info, shard, decoders=cached_decoders(info, vectorised, min_rows), **kw)


def default_table(info: TokenizerInfo, shard: int = 0, **kw: Any) -> RidTable:
    """A shard's table with the tokenizer's own decoders (`decoders_for`'s defaults)."""
    return RidTable(info, shard, decoders=cached_decoders(info), **kw)


Push = Callable[[list[int]], str]


def decoding(info: TokenizerInfo, skip: bool = True, prompt: Iterable[int] = (),
             keep: frozenset[int] = frozenset(), decoder: RowDecoder | None = None
             ) -> tuple[Push, Callable[[], str]]:
    """One request's rows through a shard's decoder (the tokenizer family's unless given),
    on a one-slot state: (push a row's ids -> its text, flush -> what the slot still holds)."""
    dec = decoder or cached_decoders(info).per_row
    state = one_slot(dec, skip, prompt, keep)

    def push(ids: list[int]) -> str:
        return dec.push(state, 0, list(ids))

    def flush() -> str:
        return "".join(dec.flush(state, [0], np.zeros(1, np.int64))[1])

    return push, flush


def one_slot(dec: RowDecoder, skip: bool = True, prompt: Iterable[int] = (),
             keep: frozenset[int] = frozenset()) -> Slots:
    """A one-slot state whose slot 0 holds a request's decoder state after its prompt."""
    state = Slots(1)
    opts = Open("r", skip_special_tokens=skip, prompt_ids=list(prompt))
    state.bind_plain(0, "r", dec.start(opts, keep), 0, 0, 0)
    return state


def byte_decoding(table: list[bytes]) -> tuple[Push, Callable[[], str]]:
    """Byte-level decoding over a byte table (ids in range, no prompt), for the parser
    tests: the incremental UTF-8 codec, as the shard's codec step runs it."""
    codec = codecs.getincrementaldecoder("utf-8")("replace")

    def push(ids: list[int]) -> str:
        return codec.decode(b"".join([table[i] for i in ids]))

    def flush() -> str:
        return codec.decode(b"", True)

    return push, flush
