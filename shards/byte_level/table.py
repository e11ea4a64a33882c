"""Byte-level BPE's id table, and whether a tokenizer is byte-level at all: the family's
detection lives beside its decoder, chained first in shards/decoders.py.

For a ByteLevel decoder (GPT-2, Llama-3, DeepSeek, Qwen) a full decode is a pure
concatenation of each id's bytes followed by lossy UTF-8, so each id's bytes are computed
once and checked against `tokenizers`' own `decode([id])` for every id; a tokenizer whose
decoder is not plain byte-level after all gets None and is offered to the next family.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sglang_tok.tokenizer import TokenizerInfo


class ByteTables(NamedTuple):
    """Per id its bytes, index `vocab_size` (out of the vocabulary) b"": with every special
    kept, and with the specials as b"" (`skip_special_tokens`)."""

    kept: list[bytes]
    skipped: list[bytes]


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: printable char -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_CHAR_BYTES = _bytes_to_unicode()


def token_bytes(token: str) -> bytes:
    """What the ByteLevel decoder makes of one token (its raw UTF-8 if off-alphabet)."""
    try:
        return bytes(_CHAR_BYTES[c] for c in token)
    except KeyError:
        return token.encode("utf-8")


def is_byte_level(decoder: Any) -> bool:
    """A decoder spec of ByteLevel alone, or a Sequence of ByteLevel steps only."""
    if not isinstance(decoder, dict):
        return False
    if decoder.get("type") == "ByteLevel":
        return True
    if decoder.get("type") == "Sequence":
        return all(d.get("type") == "ByteLevel" for d in decoder.get("decoders", []))
    return False


_FAMILY = "byte_level"


def byte_level_table(info: TokenizerInfo) -> ByteTables | None:
    """This tokenizer's tables if it is byte-level BPE, checked id by id against
    `tokenizers`; None for any other. Built once per tokenizer (`info.family_tables`)."""
    if _FAMILY not in info.family_tables:
        info.family_tables[_FAMILY] = _build(info)
    tables: ByteTables | None = info.family_tables[_FAMILY]
    return tables


def _build(info: TokenizerInfo) -> ByteTables | None:
    if not info.has_text or not is_byte_level(info.decoder_spec):
        return None
    vocab, tok, singles = info.vocab_size, info.tokenizer, info.token_texts
    table = [b""] * (vocab + 1)
    for tid in range(vocab):
        token = tok.id_to_token(tid)
        if token is not None:
            table[tid] = token_bytes(token)
    # the reference decode of every id, against the table
    if not all(table[i].decode("utf-8", "replace") == singles.get(i, "")
               for i in range(vocab)):
        return None
    skip = table[:]
    for tid in info.special_ids:
        if tid < vocab:
            skip[tid] = b""
    return ByteTables(table, skip)


def keep_table(info: TokenizerInfo, keep: frozenset[int]) -> list[bytes]:
    """The `skip_special_tokens` table with `keep` visible (a parser's markers), once per
    tokenizer and set; a byte-level tokenizer's only."""
    tables = byte_level_table(info)
    assert tables is not None, "keep_table of a tokenizer that is not byte-level"
    kept: dict[frozenset[int], list[bytes]] = info.family_tables.setdefault(
        f"{_FAMILY}.keep", {})
    table = kept.get(keep)
    if table is None:
        table = tables.skipped[:]
        for tid in keep:
            if 0 <= tid < info.vocab_size:
                table[tid] = tables.kept[tid]
        kept[keep] = table
    return table


def skip_table(info: TokenizerInfo, keep: frozenset[int]) -> list[bytes] | None:
    """`keep_table` where the tokenizer is byte-level; None where it is not (there the drop
    set is `info.special_ids - keep`)."""
    return keep_table(info, keep) if byte_level_table(info) is not None else None
