"""Byte-level BPE's one codec step: the incremental UTF-8 codec over the ids' bytes.

A byte-level id is a fixed run of bytes, so a slot's whole state is the bytes of an
incomplete character it holds and, after a prompt that ended inside one, a character to
pass over. `push` takes a row's bytes after the slot's pending ones and leaves an
incomplete character pending; `flush_held` ends slots by the codec's final rules. Every
byte-level path runs these: a per-row request's rows (`byte_level.ByteLoop.push`), the
reference loop of a message's rows (shards/byte_level/loop.py), the rows the id lookup
cannot look up (shards/byte_level/lookup.py), and attribution's id-by-id rule
(shards/byte_level/attribution.py).
"""

from __future__ import annotations

from codecs import utf_8_decode

import numpy as np
import numpy.typing as npt

from ..decoding.slots import PEND, SKIP, Slots

I64 = npt.NDArray[np.int64]


def push(state: Slots, slot: int, head: list[int], data: bytes | bytearray) -> str:
    """A row's bytes after the slot's pending ones: the whole characters, as text (the
    codec's replacement rules for broken bytes); an incomplete tail stays pending."""
    buf, width = state.pend_buf, state.width
    held = head[PEND]
    if held:
        at = slot * width
        data = buf[at:at + held] + data  # a bytearray: the codec takes any buffer
    text, used = utf_8_decode(data, "replace", False)
    rest = len(data) - used
    if rest:
        at = slot * width
        buf[at:at + rest] = data[used:]
    if rest != held:
        state.meta[slot, PEND] = head[PEND] = rest
    if head[SKIP] and text:  # the prompt's incomplete character: its first one goes
        text = text[1:]
        state.meta[slot, SKIP] = head[SKIP] = 0
    return text


def flush_held(state: Slots, at: list[int], slots: I64) -> tuple[list[int], list[str]]:
    """(where among the rows, text) of the last rows whose slot still holds bytes of an
    incomplete character: the codec's final rules (U+FFFD), after the row's own text; the
    slots hold nothing after."""
    extra_at: list[int] = []
    extra: list[str] = []
    held_all = state.pend_len[slots]  # one gather: most hold nothing
    holding = held_all.nonzero()[0]
    for k, slot, held in zip(holding.tolist(), slots[holding].tolist(),
                             held_all[holding].tolist()):
        text = utf_8_decode(state.pending[slot, :held].tobytes(), "replace", True)[0]
        if state.skip[slot]:  # the prompt's incomplete character: its first one goes
            text = text[1:]
        state.pend_len[slot] = state.skip[slot] = 0
        if text:
            extra_at.append(at[k])
            extra.append(text)
    return extra_at, extra


def prompt_state(table: list[bytes], ids: list[int]) -> tuple[bytes, int]:
    """The pending bytes a prompt (ids in [0, vocab]) leaves, and the characters to pass
    over: decode(P) ends in one U+FFFD for an incomplete tail; decode(P + I) puts the
    completed (or invalidated) character there, and the slice drops it."""
    data = b"".join([table[i] for i in ids])
    used = utf_8_decode(data, "replace", False)[1]
    pending = data[used:]
    return pending, 1 if pending else 0
