"""The byte-run rule of attribution: runs of byte ids that decode as a whole.

`tokenizers`' ByteFallback decoder turns a run of <0xNN> ids into text only as a whole
(valid UTF-8, or one U+FFFD per byte), so an id inside an open run cannot be placed when it
is pushed. The rule: each byte id is anchored at the start of the character its byte
belongs to (or of its own U+FFFD if the run is not valid UTF-8), the id that ends the run
at the start of its own text, all released with the run; a skipped special inside an open
run is zero-width where the run's text ends; an id outside the vocabulary is visible where
text next comes (every pushed id gets one entry, in push order: `Attributor`). Two families
attribute by it: SentencePiece byte fallback (shards/byte_fallback/decoder.py, its
`FallbackRun`) and the window family (shards/window/decoder.py, its `_WindowRun`), the byte
runs of any chain that has them; each through its own `RunOps`: the few facts the rule asks
of a decoder's slot."""

from __future__ import annotations

from typing import Protocol

from .attribution import VISIBLE, ZERO_WIDTH, Attributor

# what an id is to the rule (`RunOps.kind`)
TEXT_ID, BYTE_ID, DROPPED, OUTSIDE = 0, 1, 2, 3


class RunOps(Protocol):
    """A decoder's slot, as the run rule sees it."""

    def kind(self, tid: int) -> int:
        """TEXT_ID, BYTE_ID, DROPPED (a skipped special) or OUTSIDE (the vocabulary)."""
        ...

    def byte(self, tid: int) -> None:
        """Push a byte id (the open run grows; no text)."""
        ...

    def text(self, tid: int) -> str:
        """Push a text id: the text it releases (the open run's and its own)."""
        ...

    def run(self, nb: int) -> bytes:
        """The open run's last `nb` bytes."""
        ...

    def start_text(self) -> str | None:
        """At the text's very start (a decoder may strip the run's leading space): what the
        text so far decodes to; None elsewhere."""
        ...

    def flush(self) -> str:
        """What the slot still holds, by the final rules."""
        ...


class RunAttributor(Attributor):
    """An `Attributor` that follows the open run: how many of its byte ids are pushed since
    the last text (`nb`), whether it began in the prompt (`carry`: then every pending id
    waits for the next text), and one mark per pending id (bytes of the run before it)."""

    __slots__ = ("nb", "carry", "marks")

    def __init__(self, prompt_run: int = 0) -> None:
        super().__init__()
        self.nb = prompt_run
        self.carry = prompt_run > 0
        self.marks: list[int] = []

    def push(self, ids: list[int], ops: RunOps) -> str:
        """Ids through the decoder one at a time, each placed by the rule: the new text."""
        parts = []
        marks = self.marks
        for tid in ids:
            kind = ops.kind(tid)
            if kind == DROPPED:
                if self.nb:  # zero-width where the run's final text will then end
                    self.hold(tid, ZERO_WIDTH)
                    marks.append(self.nb)
                else:
                    self.zero_width(tid)
            elif kind == OUTSIDE:
                self.hold(tid, VISIBLE)  # decode drops it: visible where text next comes
                marks.append(self.nb)
            elif kind == BYTE_ID:
                self.hold(tid, VISIBLE)
                marks.append(self.nb)
                self.nb += 1
                ops.byte(tid)
            elif self.nb and not self.carry:
                t = self._close_run(tid, ops)
                if t:
                    parts.append(t)
            else:  # every pending id (none, or a run begun in the prompt) at the new text
                self.nb = 0
                self.carry = False
                t = ops.text(tid)
                self.pushed(tid, len(t))
                if t:
                    parts.append(t)
                    if marks:
                        marks.clear()
                else:  # all still pending, waiting for the next character
                    marks[:] = [0] * (len(marks) + 1)
        return "".join(parts)

    def _close_run(self, tid: int, ops: RunOps) -> str:
        """Push the text id that ends a run; anchor the run's ids per character."""
        marks = self.marks
        run = ops.run(self.nb)
        run_text = ops.start_text()
        t = ops.text(tid)
        full, done = run_chars(run)
        if run_text is None:
            run_text = full
        if t.startswith(run_text):
            left = self.run_ended(run_offsets(full, done, run_text, marks), len(run_text),
                                  len(t), tid)
        else:  # a decoder that rewrites across the run: every pending id at the new text
            self.pushed(tid, len(t))
            left = 0 if t else len(marks) + 1
        self.nb = 0
        marks.clear()
        if left:
            marks.extend([0] * left)  # still pending: they wait for the next character
        return t

    def flush(self, ops: RunOps) -> str:
        """`ops.flush`, resolving an open run as `push` does, then the end."""
        nb = self.nb
        run = ops.run(nb) if nb and not self.carry else b""
        text = ops.flush()  # everything before the run was released: this is its text
        if run:
            full, done = run_chars(run)
            self.run_ended(run_offsets(full, done, text, self.marks), len(text), len(text))
        elif text:
            self.produced(len(text))
        self.end()
        self.nb, self.carry, self.marks = 0, False, []
        return text


def run_chars(data: bytes) -> tuple[str, list[int]]:
    """What ByteFallback makes of a whole run's bytes, and, for each m in 0..len(data), how
    many of its characters lie wholly within the first m bytes."""
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


def run_offsets(full: str, done: list[int], run_text: str, marks: list[int]) -> list[int]:
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
