"""The values parsers hand back, as msgspec structs so the shard can put them on the wire as is."""

from __future__ import annotations

import msgspec

# on the wire as is (Delta.tool_calls): defined with the other frames
from ..protocol import ToolCallDelta

__all__ = ["ParsedDelta", "ParserError", "ToolCallDelta", "merge"]


class ParserError(ValueError):
    """An OPEN names a parser that does not exist; the shard turns it into a terminal error."""


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
    """Concatenate deltas channel by channel and call by call (tests, non-streaming use)."""
    text = "".join(d.text for d in deltas)
    reasoning = "".join(d.reasoning for d in deltas)
    calls: dict[int, ToolCallDelta] = {}
    for d in deltas:
        for c in d.tool_calls or ():
            have = calls.get(c.index)
            if have is None:
                calls[c.index] = ToolCallDelta(c.index, c.name, c.arguments)
            else:
                have.arguments += c.arguments
                if c.name is not None:
                    have.name = c.name
    stop = next((d.stop for d in deltas if d.stop is not None), None)
    ended = any(d.ended_with_tool_calls for d in deltas)
    return ParsedDelta(text, reasoning, [calls[i] for i in sorted(calls)] or None, stop, ended)
