"""Incremental detokenization that matches a full `Tokenizer.decode`, character for character.

Contract (protocol section 5, rule 2): for prompt context P and pushed ids I, the
concatenation of everything `push` and `flush` return equals
`decode(P + I)[len(decode(P)):]`. Text once returned is never revised, and no returned
text ends in a U+FFFD that the full decode would not have.

Two implementations share that contract:
- `ByteStream`: byte-level BPE. Decoding is a concatenation of per-id bytes followed by
  lossy UTF-8, so an incremental UTF-8 decoder over table lookups is exact, and work per
  id is constant (no FFI call, no window).
- `WindowStream`: every other decoder pipeline (Metaspace, ByteFallback, WordPiece...).
  It decodes a bounded window of recent ids and slides the window only where the decode
  of the shorter window is a suffix of the longer one, so work per step is bounded by the
  window, never by the request's history.
"""

from __future__ import annotations

from codecs import utf_8_decode
from typing import Protocol

from .tokenizer import TokenizerInfo

# WindowStream keeps at least CONTEXT ids behind the emission point and slides once the
# window reaches SLIDE_AT ids: decode cost per step is O(SLIDE_AT), amortised.
CONTEXT = 6
SLIDE_AT = 24


class Stream(Protocol):
    def push(self, ids: list[int]) -> str: ...
    def push_one(self, tid: int) -> str: ...
    def flush(self) -> str: ...


class ByteStream:
    """Exact incremental decode for byte-level tokenizers; ids must be in [0, vocab].

    The state is public (`table`, `pending`, `skip`) because a shard's hot loop inlines
    `push` for single-option requests; this class is the reference for that loop.
    """

    __slots__ = ("table", "pending", "skip")

    def __init__(self, table: list[bytes], prompt_ids: list[int] = ()) -> None:  # type: ignore[assignment]
        self.table = table
        self.pending = b""  # an incomplete UTF-8 sequence carried to the next push
        self.skip = 0
        if prompt_ids:
            self._decode(b"".join([table[i] for i in prompt_ids]))
            # decode(P) ends in one U+FFFD for an incomplete tail; decode(P + I) puts the
            # completed (or invalidated) character there, and the slice drops it.
            self.skip = 1 if self.pending else 0

    def _decode(self, data: bytes, final: bool = False) -> str:
        if self.pending:
            data = self.pending + data
        text, used = utf_8_decode(data, "replace", final)
        self.pending = data[used:] if used != len(data) else b""
        if self.skip and text:
            text = text[1:]
            self.skip = 0
        return text

    def push(self, ids: list[int]) -> str:
        table = self.table
        return self._decode(b"".join([table[i] for i in ids]))

    def push_one(self, tid: int) -> str:
        return self._decode(self.table[tid])

    def flush(self) -> str:
        return self._decode(b"", True)


class WindowStream:
    """Exact incremental decode for any `tokenizers` decoder pipeline, on a bounded window."""

    __slots__ = ("_decode", "_ids", "_emitted", "_drop", "_vocab", "_bytes", "_hold_fffd")

    def __init__(self, info: TokenizerInfo, skip_special: bool, prompt_ids: list[int] = ()) -> None:  # type: ignore[assignment]
        tok = info.tokenizer
        self._decode = lambda ids: tok.decode(ids, skip_special_tokens=False)
        self._vocab = info.vocab_size
        self._drop = info.special_ids if skip_special else frozenset()
        self._bytes = info.byte_fallback_ids
        self._hold_fffd = not self._bytes
        self._ids: list[int] = self._keep(prompt_ids)
        # char offset into decode(self._ids) up to which text is emitted or is prompt
        self._emitted = len(self._decode(self._ids)) if self._ids else 0
        self._slide()

    def _keep(self, ids: list[int]) -> list[int]:
        # `decode` drops these ids before its decoder runs; dropping them here keeps the
        # byte-run test below looking at what the decoder sees.
        vocab, drop = self._vocab, self._drop
        return [i for i in ids if 0 <= i < vocab and i not in drop]

    def push(self, ids: list[int]) -> str:
        kept = self._keep(ids)
        if not kept:
            return ""
        self._ids.extend(kept)
        if kept[-1] in self._bytes:
            return ""  # a ByteFallback run is decoded all-or-nothing once it ends
        text = self._decode(self._ids)
        end = len(text)
        if self._hold_fffd:
            while end > self._emitted and text[end - 1] == "\ufffd":
                end -= 1
        out = ""
        if end > self._emitted:
            out = text[self._emitted:end]
            self._emitted = end
        if len(self._ids) >= SLIDE_AT:
            self._slide(text)
        return out

    def push_one(self, tid: int) -> str:
        return self.push([tid])

    def flush(self) -> str:
        if not self._ids:
            return ""
        text = self._decode(self._ids)
        out = text[self._emitted:]
        self._emitted = len(text)
        return out

    def _slide(self, text: str | None = None) -> None:
        ids = self._ids
        if len(ids) < SLIDE_AT:
            return
        if text is None:
            text = self._decode(ids)
        cut = len(ids) - CONTEXT
        byte_ids = self._bytes
        while cut > 0 and ids[cut] in byte_ids and ids[cut - 1] in byte_ids:
            cut -= 1
        if cut <= 0:
            return
        tail = self._decode(ids[cut:])
        shift = len(text) - len(tail)
        # only where the short window's text is a suffix of the long one's, and the
        # dropped part lies wholly behind what was emitted
        if shift >= 0 and text.endswith(tail) and self._emitted >= shift:
            del ids[:cut]
            self._emitted -= shift


def make_stream(info: TokenizerInfo, skip_special: bool, prompt_ids: list[int] = ()) -> Stream:  # type: ignore[assignment]
    """The fastest exact stream for this tokenizer; prompt ids may be any int64."""
    if info.byte_table is not None:
        table = info.byte_table_skip if skip_special else info.byte_table
        assert table is not None
        vocab = info.vocab_size
        prompt = [i if 0 <= i < vocab else vocab for i in prompt_ids]
        return ByteStream(table, prompt)
    return WindowStream(info, skip_special, prompt_ids)
