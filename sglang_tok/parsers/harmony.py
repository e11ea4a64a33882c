"""gpt-oss (OpenAI Harmony): messages with channels; its own framing, so its own parser.

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.F <|constrain|>json<|message|>{}<|call|>
    <|start|>assistant<|channel|>final<|message|>CONTENT<|return|>

Harmony does not fit the engine's model of one content channel with calls in it (a
reasoning block, then content): the output is a sequence of messages, each with a header
(`<|start|>` or `<|channel|>` up to `<|message|>`) that says where its body goes, and
reasoning may come back after a call's preamble. So this is a small parser of its own, a
`ToolParser` subclass that reuses the engine's call bookkeeping (indices, `tools` names,
malformed and cut flags) and gives the same ParsedDelta contract; its reasoning leaves as
`Thought` items (the pipeline runs no `<think>` parser for it).

Grammar (every decision on the text so far; a partial marker is held):
- Outside messages, text is content; `<|start|>` or `<|channel|>` opens a header.
- A header ends at `<|message|>`. A header cut by another `<|start|>` or by an end marker
  is content, as written. The header decides the body's channel: a recipient
  `to=functions.NAME` (in the role or the channel part) makes the message a call to NAME;
  channel `analysis` is reasoning; anything else (`final`, a `commentary` preamble with no
  recipient) is content. With the reasoning parser off, analysis messages are content as
  written (headers and markers included); with the tool parser off, or a recipient that is
  not `functions.*` (built-in tools), call messages are content as written.
- A body ends at `<|end|>`, `<|call|>` or `<|return|>` (dropped, or kept in content-as-
  written messages), or where a new header starts (`<|start|>`, `<|channel|>`).
- A call's body is its JSON arguments object, passed through as written (the
  engine's rules: closing brace held to the end, `{}` for a blank body); a body that is
  not one JSON object makes the call malformed: the message is content as written.
- `reasoning_started`: the output starts inside an analysis body.
- At the end: an open analysis body is reasoning, an open header is content, an open
  call is cut (incremental, name sent) or content.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .json_readers import ObjectArgs, object_arguments
from .markers import MarkerSet
from .readers import Call, Event, FastPath, Opened
from .schema import Schemas
from .tool_format import CloseMarker, ToolFormat
from .tools import INCREMENTAL, WHOLE, Absorbed, ToolParser
from .types import Item, Thought

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN, CONSTRAIN = "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"
_OPEN = MarkerSet([START, CHANNEL])
_HEAD_END = MarkerSet([MESSAGE, START, END, CALL, RETURN])
_BODY_END = MarkerSet([END, CALL, RETURN, START, CHANNEL])
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*([^\s<]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
FUNCTIONS = "functions."

OUT, HEAD, BODY = 0, 1, 2
REASON, CONTENT, RAW, TOOL = 0, 1, 2, 3


class ArgsReader:
    """A call message's body: its JSON arguments (the name is known from the header)."""

    __slots__ = ("args",)

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.args = ObjectArgs(0)

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        self.args.read(body, ready, out)
        return out

    def close(self, body: str) -> list[Event] | None:
        return self.args.close(body)

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read` (`readers.FastPath`): the arguments object's."""
        return self.args.fast_now()


class HarmonyParser(ToolParser):
    __slots__ = ("calls_on", "head", "hstate", "kind", "name", "reasoning_on", "started")

    def __init__(self, fmt: ToolFormat, tool_stream: str = INCREMENTAL,
                 schemas: Schemas | None = None, reasoning: bool = False,
                 calls: bool = True, started: bool = False) -> None:
        super().__init__(fmt, tool_stream, schemas)
        self.reasoning_on = reasoning
        self.calls_on = calls
        self.started = started
        self.head = ""  # HEAD: the header so far; TOOL body: its header (for give-back)
        self.name = ""  # TOOL body: the call's name
        self.hstate, self.kind = (BODY, REASON) if started and reasoning else (OUT, CONTENT)

    @property
    def idle(self) -> bool:
        return not self.held and (self.hstate == OUT or (self.hstate == BODY
                                                         and self.kind in (CONTENT, RAW)))

    @property
    def in_call(self) -> bool:
        return self.hstate == BODY and self.kind == TOOL

    def absorb(self, text: str) -> Absorbed:
        """Inside a call's message, a piece with no `<` (every marker that ends a body
        starts with `<|`), after a body whose tail holds none (no marker under way), only
        grows it: the engine's `_grow`, without the search for the body's end."""
        if self.hstate != BODY or self.kind != TOOL or "<" in text:
            return None
        body = self.body
        if body.find("<", max(0, len(body) - _BODY_END.reach)) >= 0:
            return None
        del body  # `_grow` must hold the body's only reference, to grow it in place
        return self._grow(text)

    def plain_text(self, text: str) -> bool:
        return False  # Harmony's framing is its own: every marker piece goes through `step`

    def fresh(self) -> HarmonyParser:
        return HarmonyParser(self.fmt, INCREMENTAL if self.incremental else WHOLE,
                             self.schemas, self.reasoning_on, self.calls_on, self.started)

    def step(self, text: str) -> list[Item]:
        out = self.out = []
        s = self.held + text if self.held else text
        self.held = ""
        while s:
            st = self.hstate
            if st == OUT:
                s = self._out(s)
            elif st == HEAD:
                s = self._head(s)
            elif self.kind == TOOL:
                s = self._tool(s)
            else:
                s = self._body(s)
        return out

    def flush(self) -> list[Item]:
        out = self.out = []
        st, held = self.hstate, self.held
        if st == HEAD:
            out.append(self.head + held)
        elif st == BODY and self.kind == TOOL:
            if not self.calls.cut(out):
                out.append(self.head + self.body)
        elif held:
            out.append(Thought(held) if st == BODY and self.kind == REASON else held)
        self.held = self.head = self.body = ""
        self.calls.begin()
        self.reader = None
        self.hstate = OUT
        return out

    # -- states: each consumes a prefix of s and returns the rest
    def _out(self, s: str) -> str:
        at, m = _OPEN.find(s)
        if at < 0:
            keep = _OPEN.hold_from(s)
            self.held = s[keep:]
            if keep:
                self.out.append(s[:keep])
            return ""
        if at:
            self.out.append(s[:at])
        self.hstate = HEAD
        self.head = m
        return s[at + len(m):]

    def _head(self, s: str) -> str:
        old = len(self.head)
        head = self.head + s
        opener = len(START) if head.startswith(START) else len(CHANNEL)
        at, m = _HEAD_END.find(head, max(opener, old - _HEAD_END.reach))
        if at < 0:
            self.head = head
            return ""
        self.head = ""
        if m != MESSAGE:  # not a header after all: content as written
            self.out.append(head[:at])
            self.hstate = OUT
            return head[at:]
        header = head[:at + len(m)]
        self._begin(header)
        return head[at + len(m):]

    def _begin(self, header: str) -> None:
        self.hstate = BODY
        channel = _CHANNEL.search(header)
        to = _RECIPIENT.search(header)
        if to is not None:
            recipient = to.group(1)
            if self.calls_on and recipient.startswith(FUNCTIONS) and \
                    len(recipient) > len(FUNCTIONS):
                self.kind = TOOL
                self.head = header
                self.body = ""
                self.name = recipient[len(FUNCTIONS):]
                if self.incremental:
                    self.reader = ArgsReader()
                    self.path = FastPath(self.reader)
                    self.calls.begin()
                    self.calls.take([Opened(self.name)], self.out)
                return
            self.kind = RAW
        elif channel is not None and channel.group(1) == "analysis":
            self.kind = REASON if self.reasoning_on else RAW
        else:
            self.kind = CONTENT
        if self.kind == RAW:
            self.out.append(header)

    def _body(self, s: str) -> str:
        at, m = _BODY_END.find(s)
        kind = self.kind
        if at < 0:
            keep = _BODY_END.hold_from(s)
            self.held = s[keep:]
            at, m = keep, ""
        elif m in (START, CHANNEL):
            self.hstate = OUT
            m = ""  # the next header's, not this body's
        else:
            self.hstate = OUT
        if at:
            self.out.append(Thought(s[:at]) if kind == REASON else s[:at])
        if m and kind == RAW:
            self.out.append(m)
        return "" if not m and self.hstate == BODY else s[at + len(m):]

    def _tool(self, s: str) -> str:
        body, self.body = self.body, ""
        old = len(body)
        body += s
        at, m = _BODY_END.find(body, max(0, old - _BODY_END.reach))
        if at < 0:
            self.body = body
            reader = self.reader
            if reader is not None and not self.calls.rejected:  # incremental
                self.calls.take(reader.read(body, _BODY_END.hold_from(body)), self.out)
                path = self.path
                if path.fast_now is not None:  # (as the engine's `_call`)
                    path.fast = path.fast_now()
            return ""
        inner = body[:at]
        end = "" if m in (START, CHANNEL) else m
        reader, self.reader = self.reader, None
        if reader is not None:  # incremental
            ok = self.calls.close(reader, inner, self.out)
        else:
            args = object_arguments(inner)
            ok = self.calls.whole(None if args is None else [Call(self.name, args)], self.out)
        if not ok:
            self.out.append(self.head + inner + end)
        self.head = ""
        self.hstate = OUT
        return body[at + len(end):]


def gpt_oss() -> ToolFormat:
    return ToolFormat("gpt-oss", CHANNEL, lambda: CloseMarker(CALL), None, ArgsReader,
                      inner=(START, MESSAGE, END, RETURN, CONSTRAIN), parser=HarmonyParser)
