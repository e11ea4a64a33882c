"""One request's parsing pipeline: reasoning, then tool calls, then service stop strings.

    decoded piece --> ReasoningParser --content--> ToolParser --text--> stop strings --> text
                             `--reasoning--------------------------------------------> reasoning
                                                  `--calls--------------------------> tool_calls

Stop strings (OPEN `stop`) are matched in the content text only: never in reasoning
(vLLM #14399, #52486) and never inside a tool call; a tool call is a boundary no stop
string spans. A match ends the request: text after it, and calls after it, are dropped.
`min_tokens`: content released before `exempt_end()` is called is never matched; the
shard calls it right after feeding the text of the `min_tokens`-th id (splitting that row
if it has to), so the exempt part depends only on the ids, never on the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..stops import StopMatcher
from .reasoning import CONTENT, REASONING, ReasoningParser
from .tools import NOTHING, Absorbed, ToolParser
from .types import Item, ParsedDelta, Thought, ToolCallDelta, concat, merge


class ParsedStream:
    """One request's parsers behind one call per piece (`feed`) and one at the end
    (`finish`, or `last` for the last row's text). The shortcuts for a piece that passes
    through unchanged live here, so a caller never reads the pipeline's state to skip it."""

    __slots__ = (
        "after",
        "calling",
        "close_first",
        "called",
        "exempt",
        "include_stop",
        "live",
        "reasoning",
        "stopped",
        "stops",
        "plain",
        "quotes",
        "thinking",
        "tool_first",
        "tool_second",
        "tools",
    )

    def __init__(self, reasoning: ReasoningParser | None = None, tools: ToolParser | None = None,
                 stop: list[str] | None = None, include_stop_str: bool = False,
                 min_tokens: int = 0) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.stops = StopMatcher(stop) if stop else None
        self.include_stop = include_stop_str
        self.exempt = min_tokens > 0  # content is exempt from stop matching until exempt_end
        self.stopped: str | None = None
        self.called = False  # a call stands (sent, and not flagged malformed)
        self.live: set[int] = set()
        # the hot path: a piece holding no character that starts a marker, while nothing is
        # held anywhere, passes through with one `in` test per channel (two for a format
        # whose markers start with two characters: pythonic's `[` and `<|python_start|>`;
        # NUL stands for "no second": a piece with one only takes the slow, exact way)
        self.tool_first, self.tool_second = _first_chars(
            tools.fmt.opener.markers if tools else (), 2)
        # a format that reads Markdown quoting: a skipped piece still updates its state
        self.quotes = tools.quotes if tools is not None else None
        # ("": no piece may skip the reasoning parser)
        self.close_first = _first_chars(reasoning.close_markers if reasoning else (), 1)[0] or ""
        self.plain = False
        # a call was delivered: a plain piece must not end with whitespace (`ToolParser.idle`)
        self.after = False
        self.calling = False  # see `_update`
        self._update()

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker string of this pipeline's parsers (see `marker_token_ids`)."""
        return ((self.reasoning.markers if self.reasoning else ())
                + (self.tools.markers if self.tools else ()))

    def exempt_end(self) -> None:
        """The `min_tokens`-th id's text has been fed: later content is matched."""
        self.exempt = False
        self._update()

    def feed(self, text: str) -> ParsedDelta:
        """A decoded piece: what it releases, by channel. A piece with nothing to parse
        (plain content with nothing held, all reasoning, or a fragment inside a call)
        takes a shortcut; the rest go through `step`."""
        if self.plain:
            first = self.tool_first
            tools = self.tools
            if (first is None or (first not in text and self.tool_second not in text)
                    or (tools is not None and tools.plain_text(text))) \
                    and not (self.after and text[-1:].isspace()):
                # `plain_text`: a marker's first character but no marker (`<think>` or
                # code in content)
                q = self.quotes
                if q is not None and (not q.quiet or "\n" in text or "`" in text
                                      or "~" in text):
                    q.feed(text)
                return ParsedDelta(text)
        elif self.thinking and self.close_first not in text:
            return ParsedDelta("", text)
        elif self.calling:  # a piece that cannot end the call only grows it (`absorb`)
            t = self.tools
            assert t is not None
            got = t.absorb(text)
            # the common pieces inline: an argument fragment; nothing (whole mode)
            if type(got) is ToolCallDelta:
                return ParsedDelta("", "", [got])
            if got is NOTHING:
                return ParsedDelta()
            return self._absorbed(got, text)
        if self.stopped is not None:
            return ParsedDelta()
        r, t = self.reasoning, self.tools
        if t is not None and (r is None or r.state == CONTENT):
            got = t.absorb(text)
            if got is not None:
                return self._absorbed(got, text)
        return self.step(text)

    def _absorbed(self, got: Absorbed, text: str) -> ParsedDelta:
        """The piece's delta from what `tools.absorb` gave for it (`tools.Absorbed`):
        items (a call's name or flags, text released) go out as `_content` sends a
        step's (stops flushed)."""
        if got is None:
            return self.step(text)
        if isinstance(got, ToolCallDelta):
            return ParsedDelta("", "", [got])
        if not got:
            return ParsedDelta()
        if self.stops is None or self.exempt:
            delta = self._plain(got, "")
        else:
            delta = self._stopped(got, "", False)
        self._update()  # (text released outside a call: idle again; a stop string matched)
        return delta

    def last(self, text: str, tail: str) -> ParsedDelta:
        """The last row's text and the decoder's tail, then `finish`, as one delta. Most
        requests end in plain content with nothing held: then both pass through as they
        are and `finish` has nothing to release, so neither is built."""
        if self.stopped is not None:
            return ParsedDelta()
        if self.plain:
            both = text + tail if tail else text
            first = self.tool_first
            if (first is None or (first not in both and self.tool_second not in both)) \
                    and not (self.after and both[-1:].isspace()):
                return ParsedDelta(both)
        parts = [self.feed(text)]
        if self.stopped is None:
            parts += [self.feed(tail), self.finish()]
        return parts[0] if len(parts) == 1 else concat(parts)

    def step(self, text: str) -> ParsedDelta:
        """`feed`'s full way, for a piece none of its shortcuts took."""
        reasoning = ""
        if self.reasoning is not None:
            text, reasoning = self.reasoning.split(text)
        delta = self._content(text, reasoning, False)
        self._update()
        return delta

    def _update(self) -> None:
        r, t = self.reasoning, self.tools
        # inside the reasoning block with nothing held: a piece without the close marker's
        # first character is all reasoning
        self.thinking = (r is not None and r.state == REASONING and not r.held
                         and self.close_first != "")
        self.after = t is not None and t.after_call
        # inside a call, content channel: a piece goes straight to `tools.absorb`
        self.calling = (t is not None and t.in_call and (r is None or r.state == CONTENT)
                        and self.stopped is None)
        self.plain = ((r is None or r.state == CONTENT)
                      and (t is None or (t.idle and self.tool_first is not None))
                      and (self.stops is None or self.exempt) and self.stopped is None)

    def finish(self) -> ParsedDelta:
        """The request ended (its last row, an abort or an error): release everything held."""
        if self.stopped is not None:
            return ParsedDelta(ended_with_tool_calls=self.called)
        content = reasoning = ""
        if self.reasoning is not None:
            content, reasoning = self.reasoning.flush()
        delta = self._content(content, reasoning, True)
        delta.ended_with_tool_calls = self.called
        return delta

    def parse_full(self, text: str, exempt_chars: int = 0,
                   min_tokens_reached: bool = True) -> ParsedDelta:
        """Batch reference: a fresh pipeline fed the whole output at once (`exempt_chars`:
        the output's length after the `min_tokens`-th id).

        `min_tokens_reached=False`: the output ended before its `min_tokens`-th id, so
        `exempt_end` is never called and everything is exempt, including what `finish`
        releases (a held partial marker, a malformed call given back as text). The shard
        does the same; `exempt_chars=len(text)` alone would end the exemption before
        `finish`, as it does when the last id is the `min_tokens`-th."""
        exempt = exempt_chars > 0 or not min_tokens_reached
        fresh = ParsedStream(
            None if self.reasoning is None else self.reasoning.fresh(),
            None if self.tools is None else self.tools.fresh(),
            self.stops.stops if self.stops else None, self.include_stop, int(exempt))
        if not min_tokens_reached:
            return merge([fresh.feed(text), fresh.finish()])
        parts = [fresh.feed(text[:exempt_chars])] if exempt_chars else []
        fresh.exempt_end()
        parts += [fresh.feed(text[exempt_chars:]), fresh.finish()]
        return merge(parts)

    # ------------------------------------------------------------------ content
    def _content(self, text: str, reasoning: str, final: bool) -> ParsedDelta:
        tools = self.tools
        if tools is None:
            items: list[Item] = [text] if text else []
        elif (not final and tools.idle and self.tool_first is not None
              and self.tool_first not in text and self.tool_second not in text
              and not (tools.after_call and text[-1:].isspace())):
            items = [text] if text else []  # the common case: no marker in sight
            if self.quotes is not None:
                self.quotes.feed(text)
        else:
            items = tools.step(text)
            if final:
                items += tools.flush()
        if self.stops is None or self.exempt:
            return self._plain(items, reasoning)
        return self._stopped(items, reasoning, final)

    def _plain(self, items: Sequence[Item], reasoning: str) -> ParsedDelta:
        if len(items) == 1 and isinstance(items[0], str):
            return ParsedDelta(items[0], reasoning)
        texts, calls = [], []
        for item in items:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, Thought):  # Harmony's analysis channel
                reasoning += item.text
            else:
                calls.append(item)
        if calls:
            self._note(calls)
        return ParsedDelta("".join(texts), reasoning, calls or None)

    def _note(self, calls: list[ToolCallDelta]) -> None:
        live = self.live
        for c in calls:
            if c.malformed:
                live.discard(c.index)
            elif c.name is not None:
                live.add(c.index)
        self.called = bool(live)

    def _stopped(self, items: Sequence[Item], reasoning: str, final: bool) -> ParsedDelta:
        stops = self.stops
        assert stops is not None
        texts: list[str] = []
        calls: list[ToolCallDelta] = []
        for item in items:
            if isinstance(item, Thought):  # reasoning: never matched
                reasoning += item.text
                continue
            if isinstance(item, str):
                out, _, matched = stops.feed(item)
            else:
                out, _, matched = stops.feed("", final=True)  # no stop spans a call
            texts.append(out)
            if matched is not None:
                return self._stop(texts, reasoning, calls, matched)
            if not isinstance(item, str):
                calls.append(item)
                self._note([item])
        if final:
            out, _, matched = stops.feed("", final=True)
            texts.append(out)
            if matched is not None:
                return self._stop(texts, reasoning, calls, matched)
        return ParsedDelta("".join(texts), reasoning, calls or None)

    def _stop(self, texts: list[str], reasoning: str, calls: list[ToolCallDelta],
              matched: str) -> ParsedDelta:
        self.stopped = matched
        if self.include_stop:
            texts.append(matched)
        return ParsedDelta("".join(texts), reasoning, calls or None, matched, self.called)


def _first_chars(markers: tuple[str, ...], most: int) -> tuple[str | None, str]:
    """The characters every marker starts with, when there are at most `most` of them:
    (first, second or NUL); (None, NUL) when no piece may skip the parser."""
    firsts = sorted({m[0] for m in markers if m})
    if not firsts or len(firsts) > most:
        return None, "\0"
    return firsts[0], firsts[1] if len(firsts) > 1 else "\0"
