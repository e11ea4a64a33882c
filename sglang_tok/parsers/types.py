"""The values parsers hand back, as msgspec structs so the shard can put them on the wire as is."""

from __future__ import annotations

import msgspec

# on the wire as is (Delta.tool_calls): defined with the other frames
from sglang_tok.protocols.model.deltas import ToolCallDelta

__all__ = ["Item", "ParsedDelta", "ParserError", "Thought", "ToolCallDelta", "concat", "merge",
           "merge_calls"]


class ParserError(ValueError):
    """An OPEN names a parser that does not exist; the shard turns it into a terminal error."""


class Thought:
    """Reasoning text from a tool parser that frames its own channels (Harmony's analysis)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


# what a tool parser's step releases, in output order: content, call deltas, reasoning
# (Harmony only)
Item = str | ToolCallDelta | Thought


class ParsedDelta(msgspec.Struct, omit_defaults=True, gc=False):
    """What one `feed` (or the final `finish`) releases, split by channel."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] | None = None
    # a service stop string matched in content: the request is over (ParsedStream only)
    stop: str | None = None
    # on the last delta (finish, or the one with `stop`): at least one call was delivered,
    # so a frontend reports finish_reason "tool_calls"
    ended_with_tool_calls: bool = False


def merge(deltas: list[ParsedDelta]) -> ParsedDelta:
    """Concatenate deltas channel by channel and call by call (tests, non-streaming use).

    A call flagged `malformed` is dropped (its text is in `text`, as a batch parse gives
    it); a `cut` call stands, flagged.
    """
    text = "".join(d.text for d in deltas)
    reasoning = "".join(d.reasoning for d in deltas)
    calls = merge_calls(None, [c for d in deltas for c in d.tool_calls or ()])
    stop = next((d.stop for d in deltas if d.stop is not None), None)
    ended = any(d.ended_with_tool_calls for d in deltas)
    return ParsedDelta(text, reasoning, calls, stop, ended)


def merge_calls(have: list[ToolCallDelta] | None,
                new: list[ToolCallDelta]) -> list[ToolCallDelta] | None:
    """One entry per call (by index, in order of first appearance): fragments concatenated,
    flags kept; calls flagged `malformed` removed (`stream: false` sends this)."""
    out = {c.index: c for c in have or ()}
    for c in new:
        old = out.get(c.index)
        if old is None:
            out[c.index] = ToolCallDelta(c.index, c.name, c.arguments, c.malformed, c.cut, c.id)
        else:
            out[c.index] = ToolCallDelta(c.index, old.name if c.name is None else c.name,
                                         old.arguments + c.arguments,
                                         old.malformed or c.malformed, old.cut or c.cut,
                                         old.id if c.id is None else c.id)
    kept = [c for c in out.values() if not c.malformed]
    return kept or None


def concat(parts: list[ParsedDelta]) -> ParsedDelta:
    """One row's pieces as one delta, for a row that is fed in parts: a call's fragments
    stay fragments (per index, in order), so the row's delta streams as its parts would."""
    parts = [p for p in parts if p.text or p.reasoning or p.tool_calls or p.stop is not None]
    if len(parts) == 1:
        return parts[0]
    calls: list[ToolCallDelta] | None = None
    for p in parts:
        if p.tool_calls:
            calls = _concat_calls(calls, p.tool_calls)
    stop = next((p.stop for p in parts if p.stop is not None), None)
    return ParsedDelta("".join(p.text for p in parts), "".join(p.reasoning for p in parts),
                       calls, stop)


def _concat_calls(have: list[ToolCallDelta] | None,
                  new: list[ToolCallDelta]) -> list[ToolCallDelta]:
    """The fragments of the same call (same index) concatenated, flags kept, as a frontend
    concatenates them. A call's first entry keeps its name and "" arguments, so a row that
    opens a call still starts it as rule 4 of section 8 says."""
    out = list(have or ())
    last = {c.index: i for i, c in enumerate(out)}
    for c in new:
        i = last.get(c.index)
        old = None if i is None else out[i]
        if old is None or c.name is not None or (old.name is not None and not old.arguments):
            last[c.index] = len(out)
            out.append(ToolCallDelta(c.index, c.name, c.arguments, c.malformed, c.cut, c.id))
        else:
            out[i] = ToolCallDelta(c.index, old.name, old.arguments + c.arguments,  # type: ignore[index]
                                   old.malformed or c.malformed, old.cut or c.cut,
                                   old.id)  # type: ignore[index]
    return out
