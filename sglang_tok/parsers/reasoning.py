"""Reasoning separation for `<think>` ... `</think>` models (SGLang's `deepseek-r1`, `qwen3`).

Grammar, over the request's whole decoded output (stream and batch are the same machine
fed differently, and every decision depends only on the text so far):
- Before the block (`reasoning_started` false): leading whitespace then `<think>` opens the
  block (the whitespace and the tag are dropped). Anything else: there is no block and the
  whole output is content.
- At the block's start (after `<think>`, or from the first character when the prompt
  already opened it): further leading whitespace + `<think>` are dropped (R1-0528 repeats
  the tag the template already wrote).
- In the block: text up to the first `</think>` is reasoning; the tag is dropped and
  everything after it is content. `qwen3` also ends the block at `<tool_call>` (Qwen3.5
  opens a call without closing the block), which stays in content for the tool parser.
- At the end: a held partial tag is released into the channel it was held in; an
  unterminated block is all reasoning (the request was cut short while thinking).
"""

from __future__ import annotations

from .markers import MarkerSet
from .types import ParsedDelta

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

BEFORE, START, REASONING, CONTENT = 0, 1, 2, 3


class ReasoningParser:
    """Per-request state; `feed` per decoded piece, `finish` once, `parse_full` for batch."""

    __slots__ = ("_close", "_implicit", "_open", "held", "name", "started", "state")

    def __init__(self, name: str, started: bool, open_tag: str = THINK_OPEN,
                 close_tag: str = THINK_CLOSE, implicit_close: str | None = None) -> None:
        self.name = name
        self.started = started
        self.state = START if started else BEFORE
        self.held = ""
        self._open = _marker_set((open_tag,))
        self._close = _marker_set((close_tag, implicit_close) if implicit_close else (close_tag,))
        self._implicit = implicit_close

    @property
    def markers(self) -> tuple[str, ...]:
        return self._open.markers + self._close.markers

    @property
    def close_markers(self) -> tuple[str, ...]:
        return self._close.markers

    @property
    def open_tag(self) -> str:
        return self._open.markers[0]

    def split(self, text: str) -> tuple[str, str]:
        """(content, reasoning) released by this piece: the lean form the pipeline uses."""
        if self.state == CONTENT:
            return text, ""
        s = self.held + text if self.held else text
        self.held = ""
        reasoning = ""
        while True:
            state = self.state
            if state == REASONING:
                at, tag = self._close.find(s)
                if at < 0:
                    keep = self._close.hold_from(s)
                    self.held = s[keep:]
                    return "", reasoning + s[:keep]
                reasoning += s[:at]
                self.state = CONTENT
                return (s[at:] if tag == self._implicit else s[at + len(tag):]), reasoning
            if state == CONTENT:
                return s, reasoning
            # BEFORE or START: only whitespace seen since the last decision point
            rest = s.lstrip()
            tag = self.open_tag
            if not rest or (len(rest) < len(tag) and tag.startswith(rest)):
                self.held = s
                return "", reasoning
            if rest.startswith(tag):
                s = rest[len(tag):]
                self.state = START
                continue
            self.state = CONTENT if state == BEFORE else REASONING

    def flush(self) -> tuple[str, str]:
        held, self.held = self.held, ""
        if self.state in (BEFORE, CONTENT):
            return held, ""
        return "", held

    def feed(self, text: str) -> ParsedDelta:
        content, reasoning = self.split(text)
        return ParsedDelta(content, reasoning)

    def finish(self) -> ParsedDelta:
        content, reasoning = self.flush()
        return ParsedDelta(content, reasoning)

    def fresh(self) -> ReasoningParser:
        """A parser of the same kind and options, in its initial state."""
        return ReasoningParser(self.name, self.started, self.open_tag, self._close.markers[0],
                               self._implicit)

    def parse_full(self, text: str) -> ParsedDelta:
        """The batch reference: a fresh parser of the same kind over the whole output."""
        fresh = self.fresh()
        c1, r1 = fresh.split(text)
        c2, r2 = fresh.flush()
        return ParsedDelta(c1 + c2, r1 + r2)


_SETS: dict[tuple[str, ...], MarkerSet] = {}


def _marker_set(markers: tuple[str, ...]) -> MarkerSet:
    """Marker sets are immutable: one per distinct tuple, shared by every request."""
    ms = _SETS.get(markers)
    if ms is None:
        ms = _SETS[markers] = MarkerSet(markers)
    return ms
