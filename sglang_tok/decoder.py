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

from tokenizers import Tokenizer

from .attribution import VISIBLE, ZERO_WIDTH, Attributor
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

    `push` is one call with no call inside it: the per-row path calls it once per row.
    The state is public (`table`, `pending`, `skip`) so that a shard can build one from a
    slot's arrays (`byte_level.ByteLoop.stream_of`).
    """

    __slots__ = ("table", "pending", "skip")

    def __init__(self, table: list[bytes], prompt_ids: list[int] = ()) -> None:  # type: ignore[assignment]
        self.table = table
        self.pending = b""  # an incomplete UTF-8 sequence carried to the next push
        self.skip = 0
        if prompt_ids:
            self.push(prompt_ids)
            # decode(P) ends in one U+FFFD for an incomplete tail; decode(P + I) puts the
            # completed (or invalidated) character there, and the slice drops it.
            self.skip = 1 if self.pending else 0

    def push(self, ids: list[int]) -> str:
        table = self.table
        data = table[ids[0]] if len(ids) == 1 else b"".join([table[i] for i in ids])
        if self.pending:
            data = self.pending + data
        text, used = utf_8_decode(data, "replace", False)
        self.pending = data[used:] if used != len(data) else b""
        if self.skip and text:
            text = text[1:]
            self.skip = 0
        return text

    def push_one(self, tid: int) -> str:
        return self.push((tid,))  # type: ignore[arg-type]

    def flush(self) -> str:
        """The held bytes by the codec's final rules (U+FFFD for an incomplete character)."""
        text = utf_8_decode(self.pending, "replace", True)[0]
        self.pending = b""
        if self.skip and text:
            text = text[1:]
        self.skip = 0
        return text


class WindowStream:
    """Exact incremental decode for any `tokenizers` decoder pipeline, on a bounded window.

    Held text: `tokenizers`' ByteFallback decoder turns a run of <0xNN> ids into text only
    as a whole (valid UTF-8, or one U+FFFD per byte), so a character completed inside a run
    can still become U+FFFD if the run ends mid-character. An open run is therefore held
    until a non-byte id (or the end) closes it; everything before it is released at once.
    """

    __slots__ = ("_decode", "_ids", "_emitted", "_drop", "_vocab", "_bytes", "_hold_fffd",
                 "_tok", "_nb", "_carry", "_marks")

    def __init__(self, info: TokenizerInfo, skip_special: bool, prompt_ids: list[int] = (),  # type: ignore[assignment]
                 keep: frozenset[int] = frozenset()) -> None:
        tok = info.tokenizer
        self._tok = tok
        self._decode = lambda ids: tok.decode(ids, skip_special_tokens=False)
        self._vocab = info.vocab_size
        # `keep`: specials a parser must see (parsers.marker_token_ids), never dropped
        self._drop = (info.special_ids - keep if keep else info.special_ids) if skip_special \
            else frozenset()
        self._bytes = info.byte_fallback_ids
        self._hold_fffd = not self._bytes
        ids = self._ids = self._keep(prompt_ids)
        # char offset into decode(self._ids) up to which text is emitted or is prompt
        text = self._decode(ids) if ids else ""
        self._emitted = len(text)
        # attribution only (push_attributed): byte ids in the open run, whether it began in
        # the prompt, and one mark per id the attributor holds pending (see _run_offsets)
        nb = 0
        while nb < len(ids) and ids[-1 - nb] in self._bytes:
            nb += 1
        self._nb = nb
        self._carry = nb > 0
        self._marks: list[int] = []
        if len(ids) >= SLIDE_AT:
            self._slide(text, len(ids))

    def _keep(self, ids: list[int]) -> list[int]:
        # `decode` drops these ids before its decoder runs; dropping them here keeps the
        # byte-run test below looking at what the decoder sees.
        vocab, drop = self._vocab, self._drop
        return [i for i in ids if 0 <= i < vocab and i not in drop]

    def push(self, ids: list[int]) -> str:
        kept = self._keep(ids)
        if not kept:
            return ""
        all_ids = self._ids
        all_ids.extend(kept)
        byte_ids = self._bytes
        if kept[-1] not in byte_ids:
            return self._release(len(all_ids))
        # an open ByteFallback run: hold it, release the ids before it (rows of several ids)
        j = len(kept) - 1
        while j and kept[j - 1] in byte_ids:
            j -= 1
        return self._release(len(all_ids) - len(kept) + j) if j else ""

    def push_one(self, tid: int) -> str:
        return self.push([tid])

    def flush(self) -> str:
        if not self._ids:
            return ""
        text = self._decode(self._ids)
        out = text[self._emitted:]
        self._emitted = len(text)
        return out

    def _release(self, end: int) -> str:
        """Emit decode(ids[:end]) past what was emitted; ids[:end] ends outside any byte run."""
        ids = self._ids
        text = self._decode(ids if end == len(ids) else ids[:end])
        stop = len(text)
        if self._hold_fffd:
            while stop > self._emitted and text[stop - 1] == "\ufffd":
                stop -= 1
        out = ""
        if stop > self._emitted:
            out = text[self._emitted:stop]
            self._emitted = stop
        if end >= SLIDE_AT:
            self._slide(text, end)
        return out

    def _slide(self, text: str, end: int) -> None:
        """Drop the window's front where decode(ids[cut:end]) is a suffix of `text`.

        `text` is decode(ids[:end]); ids past `end` (an open byte run) stay in the window.
        """
        ids = self._ids
        cut = end - CONTEXT
        byte_ids = self._bytes
        while cut > 0 and ids[cut] in byte_ids and ids[cut - 1] in byte_ids:
            cut -= 1
        if cut <= 0:
            return
        tail = self._decode(ids[cut:end])
        shift = len(text) - len(tail)
        # only where the short window's text is a suffix of the long one's, and the
        # dropped part lies wholly behind what was emitted
        if shift >= 0 and text.endswith(tail) and self._emitted >= shift:
            del ids[:cut]
            self._emitted -= shift

    # ------------------------------------------------------------------ attribution
    def push_attributed(self, ids: list[int], attr: Attributor) -> str:
        """`push`, one id at a time, anchoring each id where the text it helped complete begins.

        Inside a byte run that is per character: each byte id at the start of the character
        its byte belongs to (or of its own U+FFFD if the run is not valid UTF-8), the id
        that ends the run at the start of its own text, all released with the run.
        """
        parts = []
        drop, vocab, byte_ids, marks = self._drop, self._vocab, self._bytes, self._marks
        window = self._ids
        for tid in ids:
            if tid in drop:
                if self._nb:  # zero-width where the run's final text will then end
                    attr.hold(tid, ZERO_WIDTH)
                    marks.append(self._nb)
                else:
                    attr.zero_width(tid)
            elif not 0 <= tid < vocab:
                attr.hold(tid, VISIBLE)  # decode drops it: visible where text next comes
                marks.append(self._nb)
            elif tid in byte_ids:
                attr.hold(tid, VISIBLE)
                marks.append(self._nb)
                self._nb += 1
                window.append(tid)
            elif self._nb and not self._carry:
                t = self._close_run(tid, attr)
                if t:
                    parts.append(t)
            else:  # every pending id (none, or a run begun in the prompt) at the new text
                self._nb = 0
                self._carry = False
                window.append(tid)
                t = self._release(len(window))
                attr.pushed(tid, len(t))
                if t:
                    parts.append(t)
                    if marks:
                        marks.clear()
                else:  # all still pending, waiting for the next character
                    marks[:] = [0] * (len(marks) + 1)
        return "".join(parts)

    def flush_attributed(self, attr: Attributor) -> str:
        """`flush`, resolving an open run as `push_attributed` does, then ending `attr`."""
        nb = self._nb
        run = self._ids[len(self._ids) - nb:] if nb and not self._carry else []
        text = self.flush()  # everything before the run was released: this is its text
        if run:
            full, done = _run_chars(self._tok, run)
            attr.run_ended(_run_offsets(full, done, text, self._marks), len(text), len(text))
        elif text:
            attr.produced(len(text))
        attr.end()
        self._nb, self._carry, self._marks = 0, False, []
        return text

    def _close_run(self, tid: int, attr: Attributor) -> str:
        """Push the non-byte id that ends a run; anchor the run's ids per character."""
        nb, marks, ids = self._nb, self._marks, self._ids
        run = ids[len(ids) - nb:]
        run_text = None
        if not self._emitted:
            # at the text's start a decoder may strip the run's leading space: ask it
            run_text = self._decode(ids)
        ids.append(tid)
        t = self._release(len(ids))
        full, done = _run_chars(self._tok, run)
        if run_text is None:
            run_text = full
        if t.startswith(run_text):
            left = attr.run_ended(_run_offsets(full, done, run_text, marks), len(run_text),
                                  len(t), tid)
        else:  # a decoder that rewrites across the run: every pending id at the new text
            attr.pushed(tid, len(t))
            left = 0 if t else len(marks) + 1
        self._nb = 0
        marks.clear()  # push_attributed holds this list
        if left:
            marks.extend([0] * left)  # still pending: they wait for the next character
        return t


def _run_chars(tok: Tokenizer, run: list[int]) -> tuple[str, list[int]]:
    """What ByteFallback makes of a whole run of byte ids, and, for each m in 0..len(run),
    how many of its characters lie wholly within the first m bytes."""
    data = bytes([int(str(tok.id_to_token(i))[3:5], 16) for i in run])  # "<0xNN>"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # then one U+FFFD per byte
        return "\ufffd" * len(data), list(range(len(data) + 1))
    done = [0] * (len(data) + 1)
    n = 0
    for x in range(1, len(data) + 1):
        if x == len(data) or data[x] & 0xC0 != 0x80:
            n += 1
        done[x] = n
    return text, done


def _run_offsets(full: str, done: list[int], run_text: str, marks: list[int]) -> list[int]:
    """Per pending id, the char offset into `run_text` where the text it completes begins.

    A mark m says "after m bytes of the run" (a byte id's mark is its own index): the text
    it completes begins at the character holding byte m, after the characters wholly
    within the first m bytes.
    """
    shift = len(full) - len(run_text)
    if not shift:
        return [done[m] for m in marks]
    # the decoder stripped leading characters of the run (text start): count from its end
    size = len(run_text)
    return [min(size, max(0, done[m] - shift)) for m in marks]


class NullStream:
    """`--tokenizer none`: ids pass through, no text (SGLang's `Skip` backend)."""

    __slots__ = ()

    def push(self, ids: list[int]) -> str:
        return ""

    def push_one(self, tid: int) -> str:
        return ""

    def flush(self) -> str:
        return ""


def make_stream(info: TokenizerInfo, skip_special: bool, prompt_ids: list[int] = (),  # type: ignore[assignment]
                keep: frozenset[int] = frozenset()) -> Stream:
    """The fastest exact stream for this tokenizer; prompt ids may be any int64.

    `keep`: special ids that stay visible under `skip_special` (a parser's markers).
    """
    if not info.has_text:
        return NullStream()
    if info.byte_table is not None:
        table = info.byte_table_skip if skip_special else info.byte_table
        if skip_special and keep:
            table = keep_table(info, keep)
        assert table is not None
        vocab = info.vocab_size
        prompt = [i if 0 <= i < vocab else vocab for i in prompt_ids]
        return ByteStream(table, prompt)
    return WindowStream(info, skip_special, prompt_ids, keep)


_KEEP_TABLES: dict[tuple[int, frozenset[int]], list[bytes]] = {}


def keep_table(info: TokenizerInfo, keep: frozenset[int]) -> list[bytes]:
    """The `skip_special_tokens` byte table with `keep` visible, once per tokenizer and set."""
    key = (id(info), keep)
    table = _KEEP_TABLES.get(key)
    if table is None:
        assert info.byte_table is not None and info.byte_table_skip is not None
        table = info.byte_table_skip[:]
        for tid in keep:
            if 0 <= tid < info.vocab_size:
                table[tid] = info.byte_table[tid]
        _KEEP_TABLES[key] = table
    return table
