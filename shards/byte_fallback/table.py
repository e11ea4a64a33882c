"""SentencePiece byte fallback's id table: what each id is to the decoder chain.

For a decoder chain Replace("▁", " "), ByteFallback, Fuse[, Strip(" ", 1, 0)] each id is
a text piece (its piece with "▁" as " "), a <0xNN> byte, or dropped before decoding (a
skipped special, an id outside the vocabulary); `fallback_table` builds that per id and
checks every id against `tokenizers` itself, or gives None for any other chain (its
tokenizer then takes the window family, shards/window/).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.ragged import starts_of
from sglang_tok.tokenizer import TokenizerInfo

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

TEXT, BYTE, DROP = 0, 1, 2  # kinds of id: a text piece, a <0xNN> byte, dropped before decode


class FallbackTable(NamedTuple):
    """Per id, as one buffer: id i's bytes are data[off[i]:off[i] + size[i]] (a byte id's
    raw byte), its kind kind[i]. Two tables are stacked (specials kept, specials dropped):
    `id + skip * stride` picks one; id `stride - 1` (out of the vocabulary) is dropped."""

    data: U8
    off: I64
    size: I64
    kind: U8
    stride: int
    strip: bool  # the chain ends in Strip(" ", 1, 0)
    pieces: list[bytes]  # the same per stacked id, as lists, for the loop
    kinds: list[int]
    texts: list[str]  # a text id's piece as str ("" for the others)


def fallback_chain(decoder: Any) -> bool | None:
    """For a decoder spec Replace("▁", " "), ByteFallback, Fuse[, Strip(" ", 1, 0)]: whether
    it strips; None for any other pipeline."""
    if not isinstance(decoder, dict) or decoder.get("type") != "Sequence":
        return None
    steps = decoder.get("decoders") or []
    if len(steps) not in (3, 4):
        return None
    rep, bf, fuse = steps[:3]
    if not (rep.get("type") == "Replace" and rep.get("pattern") == {"String": "▁"}
            and rep.get("content") == " " and bf.get("type") == "ByteFallback"
            and fuse.get("type") == "Fuse"):
        return None
    if len(steps) == 3:
        return False
    strip = steps[3]
    if (strip.get("type") == "Strip" and strip.get("content") == " "
            and strip.get("start") == 1 and strip.get("stop") == 0):
        return True
    return None


def fallback_table(info: TokenizerInfo) -> FallbackTable | None:
    """The table for a Metaspace + ByteFallback tokenizer, every id checked against
    `tokenizers` itself (after an anchor id, and alone), or None for any other. Built once
    per tokenizer (`info.family_tables`)."""
    if "byte_fallback" not in info.family_tables:
        info.family_tables["byte_fallback"] = _build(info)
    table: FallbackTable | None = info.family_tables["byte_fallback"]
    return table


def _build(info: TokenizerInfo) -> FallbackTable | None:
    tok = info.tokenizer
    strip = fallback_chain(info.decoder_spec)
    if strip is None or not info.has_text:
        return None
    vocab = info.vocab_size
    pieces: list[bytes] = [b""] * (vocab + 1)
    kinds = [DROP] * (vocab + 1)
    for tid in range(vocab):
        token = tok.id_to_token(tid)
        if token is None:
            continue
        value = info.byte_values.get(tid)
        if value is not None:
            pieces[tid], kinds[tid] = bytes([value]), BYTE
        else:
            pieces[tid], kinds[tid] = token.replace("▁", " ").encode(), TEXT
            if not pieces[tid]:
                return None  # an empty text id would end a run invisibly: not handled
    skip_pieces, skip_kinds = pieces[:], kinds[:]
    for tid in info.special_ids:
        if 0 <= tid < vocab:
            skip_pieces[tid], skip_kinds[tid] = b"", DROP
    if not _verified(info, pieces, kinds, skip_kinds, strip):
        return None
    both, both_kinds = pieces + skip_pieces, kinds + skip_kinds
    size = np.fromiter(map(len, both), np.int64, len(both))
    texts = [p.decode() if k == TEXT else "" for p, k in zip(both, both_kinds)]
    return FallbackTable(np.frombuffer(b"".join(both), np.uint8), starts_of(size)[:-1], size,
                         np.array(both_kinds, np.uint8), vocab + 1, strip, both, both_kinds,
                         texts)


def _verified(info: TokenizerInfo, pieces: list[bytes], kinds: list[int],
              skip_kinds: list[int], strip: bool) -> bool:
    tok, vocab = info.tokenizer, info.vocab_size
    anchor = next((i for i in range(vocab) if kinds[i] == TEXT and skip_kinds[i] == TEXT
                   and not pieces[i].startswith(b" ")), None)
    if anchor is None:
        return False
    head = pieces[anchor].decode()

    def alone(tid: int, drop: bool) -> str:
        if drop:
            return ""
        if kinds[tid] == BYTE:
            return chr(pieces[tid][0]) if pieces[tid][0] < 0x80 else "\ufffd"
        return pieces[tid].decode()

    for skip, table_kinds in ((False, kinds), (True, skip_kinds)):
        got = tok.decode_batch([[anchor, i] for i in range(vocab)], skip_special_tokens=skip)
        for i in range(vocab):
            if got[i] != head + alone(i, table_kinds[i] == DROP):
                return False
    for i in range(vocab):  # alone: the strip at the text's start
        text = alone(i, kinds[i] == DROP)
        if strip and text.startswith(" "):
            text = text[1:]
        if info.token_texts.get(i, text) != text:
            return False
    return True


def with_kept(tab: FallbackTable, keep: frozenset[int]) -> int:
    """A further id table after the two (`tab.stride` ids each; in the loop's lists only,
    for per-row requests): specials dropped, but `keep` (a parser's markers) kept. Its
    number (`table_sel`)."""
    stride = tab.stride
    sel = len(tab.kinds) // stride
    pick = [i if i in keep else stride + i for i in range(stride)]
    tab.pieces.extend([tab.pieces[i] for i in pick])
    tab.kinds.extend([tab.kinds[i] for i in pick])
    tab.texts.extend([tab.texts[i] for i in pick])
    return sel
