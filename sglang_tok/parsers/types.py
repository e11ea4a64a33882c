"""The values parsers hand back, as msgspec structs so the shard can put them on the wire as is."""

from __future__ import annotations

import msgspec


class ParserError(ValueError):
    """An OPEN names a parser that does not exist; the shard turns it into a terminal error."""


class ToolCallDelta(msgspec.Struct, omit_defaults=True, gc=False):
    """One fragment of one tool call: `name` on a call's first fragment, then argument text.

    A frontend concatenates `arguments` per `index`. The parsers here deliver a call in one
    fragment (name and the whole arguments JSON), because a call is released only once it is
    complete and valid: a malformed call must become text, and sent fragments cannot be
    taken back. Consumers must still concatenate, so a format that can stream arguments
    safely can do so later without a protocol change.
    """

    index: int
    name: str | None = None
    arguments: str = ""


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
