"""Tool-call parsing over the content channel: one engine, one small grammar per format.

A format is: an optional section wrapper (`open`, `close`), a call opener, a way to find
the call's end (a close marker, or the end of a balanced JSON value), and a function that
turns the call's body into `[(name, arguments_json)]` or None when it is malformed.

Rules, identical for streaming and batch (batch is the same machine fed once, and every
decision depends only on the text so far, never on how it was chunked):
- Text outside calls is content. A partial marker at the end of a piece is held.
- A call is released when it ends and parses: its name and its arguments as JSON text
  (`json.dumps(..., ensure_ascii=False)` of the parsed object), in one fragment. A call that
  ends but does not parse (bad JSON, unknown shape) is delivered as text, byte for byte,
  with its markers; so is a call still open at `finish`. Nothing is ever dropped except
  markup: wrappers and the whitespace around valid calls.
- A section wrapper, and whitespace between calls, are held as "pending markup": dropped
  once a valid call follows, released as text if text or a malformed call follows, and at
  `finish` released only if it holds more than whitespace (an opened section with no valid
  call round-trips as text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .markers import MarkerSet
from .types import ParsedDelta, ToolCallDelta

Calls = list[tuple[str, str]]

TEXT, SECTION, CALL = 0, 1, 2


def _reject_constant(value: str) -> Any:
    raise ValueError(f"not JSON: {value}")


def loads(text: str) -> Any:
    """Strict JSON: NaN and Infinity are not JSON and make the call malformed."""
    return json.loads(text, parse_constant=_reject_constant)


def arguments_json(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    return json.dumps(obj, ensure_ascii=False)


# ------------------------------------------------------------------ call ends
class CloseMarker:
    """The call ends at a fixed marker; the search resumes where the last one stopped."""

    __slots__ = ("close", "scan")

    def __init__(self, close: str) -> None:
        self.close = close
        self.scan = 0

    def end(self, body: str) -> tuple[int, int]:
        at = body.find(self.close, self.scan)
        if at < 0:
            self.scan = max(0, len(body) - len(self.close) + 1)
            return -1, -1
        return at, at + len(self.close)


_IN_STRING = re.compile(r'["\\]')
_STRUCTURE = re.compile(r'[\[\]{}"]')


class JsonEnd:
    """Where a JSON array/object that starts at `start` ends: brackets outside strings.

    Resumable: each call scans only what is new. Invalid JSON still gets an extent (its
    brackets balance somewhere, or the call stays open), and then fails to parse.
    """

    __slots__ = ("depth", "in_string", "pos")

    def __init__(self, start: int) -> None:
        self.pos = start
        self.depth = 0
        self.in_string = False

    def end(self, body: str) -> int:
        i, n = self.pos, len(body)
        while True:
            if self.in_string:
                m = _IN_STRING.search(body, i)
                if m is None:
                    self.pos = n
                    return -1
                j = m.start()
                if body[j] == "\\":
                    if j + 1 >= n:
                        self.pos = j  # the escaped character has not arrived yet
                        return -1
                    i = j + 2
                    continue
                self.in_string = False
                i = j + 1
                continue
            m = _STRUCTURE.search(body, i)
            if m is None:
                self.pos = n
                return -1
            j = m.start()
            c = body[j]
            if c == '"':
                self.in_string = True
            elif c in "[{":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    self.pos = j + 1
                    return j + 1
            i = j + 1


_NAME_RUN = re.compile(r"\s*[\w.\-]*")
ARGS = "[ARGS]"


class MistralEnd:
    """`[TOOL_CALLS]` then a JSON array/object, or (v11+ tokenizers) `name[ARGS]{json}`.

    There is no close marker: the call ends where its JSON value ends. A body that cannot
    be either form ends the call at the first character that rules it out (then the call
    is text, and that character is read again as text).
    """

    __slots__ = ("json",)

    def __init__(self) -> None:
        self.json: JsonEnd | None = None

    def end(self, body: str) -> tuple[int, int]:
        if self.json is None:
            start = self._json_start(body)
            if start < 0:
                return (-1, -1) if start == -1 else (-start - 2, -start - 2)
            self.json = JsonEnd(start)
        at = self.json.end(body)
        return at, at

    @staticmethod
    def _json_start(body: str) -> int:
        """Index of the JSON value; -1: undecided yet; <= -2: malformed at -(r + 2)."""
        head = body.lstrip()
        if not head:
            return -1
        if head[0] in "[{":
            return len(body) - len(head)
        e = _NAME_RUN.match(body).end()  # type: ignore[union-attr]
        if e == len(body):
            return -1
        if not body.startswith(ARGS, e):
            return -1 if ARGS.startswith(body[e:]) else -(e + 2)
        rest_at = e + len(ARGS)
        rest = body[rest_at:].lstrip()
        if not rest:
            return -1
        if rest[0] in "[{":
            return len(body) - len(rest)
        return -((len(body) - len(rest)) + 2)


# ------------------------------------------------------------------ call bodies
def parse_name_arguments(obj: Any) -> tuple[str, str] | None:
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    text = arguments_json(args)
    return None if text is None else (name, text)


def parse_hermes(body: str) -> Calls | None:
    try:
        call = parse_name_arguments(loads(body))
    except ValueError:
        return None
    return None if call is None else [call]


_MISTRAL_V11 = re.compile(r"\s*([\w.\-]+)\[ARGS\](.*)", re.DOTALL)


def parse_mistral(body: str) -> Calls | None:
    try:
        m = _MISTRAL_V11.fullmatch(body)
        if m is not None:
            text = arguments_json(loads(m.group(2)))
            return None if text is None else [(m.group(1), text)]
        obj = loads(body)
    except ValueError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    calls = [parse_name_arguments(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


DS_SEP = "<｜tool▁sep｜>"
_DSV3 = re.compile(r"[^<\n]*" + DS_SEP + r"([^\n]+)\n```json\n(.*)\n```\s*", re.DOTALL)
_DSV31 = re.compile(r"([^<\n]+)" + DS_SEP + r"(.*)", re.DOTALL)


def parse_deepseekv3(body: str) -> Calls | None:
    """V3: `function<sep>name\\n```json\\n{...}\\n```` ; V3.1: `name<sep>{...}`."""
    m = _DSV3.fullmatch(body) or _DSV31.fullmatch(body)
    if m is None:
        return None
    name = m.group(1).strip()
    try:
        text = arguments_json(loads(m.group(2)))
    except ValueError:
        return None
    return None if text is None or not name else [(name, text)]


DSML = "｜DSML｜"
_INVOKE_HEAD = re.compile(r'\s+name="([^"]+)"\s*>')
_PARAM = re.compile(r'\s*<' + DSML + r'parameter\s+name="([^"]+)"\s+string="(true|false)"\s*>'
                    r'(.*?)</' + DSML + r'parameter>', re.DOTALL)


def parse_dsml_invoke(body: str) -> Calls | None:
    """`<｜DSML｜invoke` + ` name="f">` then a JSON object or DSML parameters.

    A string parameter's value is kept exactly (whitespace too: it may be file content);
    a `string="false"` value must be JSON.
    """
    head = _INVOKE_HEAD.match(body)
    if head is None:
        return None
    inner = body[head.end():]
    try:
        if inner.lstrip().startswith("{"):
            text = arguments_json(loads(inner))
            return None if text is None else [(head.group(1), text)]
        params: dict[str, Any] = {}
        pos = 0
        while (m := _PARAM.match(inner, pos)) is not None:
            key, is_string, value = m.groups()
            if key in params:
                return None
            params[key] = value if is_string == "true" else loads(value)
            pos = m.end()
    except ValueError:
        return None
    if inner[pos:].strip():
        return None
    return [(head.group(1), json.dumps(params, ensure_ascii=False))]


# ------------------------------------------------------------------ formats
class ToolFormat:
    """A grammar, shared by every request using it (immutable after construction)."""

    def __init__(self, name: str, call_open: str, end: Callable[[], Any],
                 parse: Callable[[str], Calls | None], section: tuple[str, str] | None = None,
                 inner: tuple[str, ...] = ()) -> None:
        self.name = name
        self.section = section
        self.call_open = call_open
        self.make_end = end
        self.parse = parse
        self.opener = MarkerSet([section[0] if section else call_open])
        closer = end()
        # a call's body can skip the engine on pieces without this character
        self.close_first = closer.close[0] if isinstance(closer, CloseMarker) else None
        self.close_marker = closer.close if isinstance(closer, CloseMarker) else ""
        self.close_reach = max(0, len(self.close_marker) - 1)
        self.in_section = MarkerSet([call_open, section[1]]) if section else None
        # every marker string (special tokens inside them must reach the parser)
        close = [closer.close] if isinstance(closer, CloseMarker) else []
        self.markers = tuple(dict.fromkeys([*(section or ()), call_open, *close, *inner]))


def _close(marker: str) -> Callable[[], CloseMarker]:
    return lambda: CloseMarker(marker)


def _dsml(name: str, section: str) -> ToolFormat:
    return ToolFormat(name, f"<{DSML}invoke", _close(f"</{DSML}invoke>"), parse_dsml_invoke,
                      (f"<{DSML}{section}>", f"</{DSML}{section}>"),
                      (f"<{DSML}parameter", f"</{DSML}parameter>"))


FORMATS: dict[str, ToolFormat] = {
    "deepseekv4": _dsml("deepseekv4", "tool_calls"),
    "deepseekv32": _dsml("deepseekv32", "function_calls"),
    "deepseekv3": ToolFormat(
        "deepseekv3", "<｜tool▁call▁begin｜>", _close("<｜tool▁call▁end｜>"), parse_deepseekv3,
        ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), (DS_SEP,)),
    "hermes": ToolFormat("hermes", "<tool_call>", _close("</tool_call>"), parse_hermes),
    "mistral": ToolFormat("mistral", "[TOOL_CALLS]", MistralEnd, parse_mistral,
                          inner=(ARGS,)),
}
FORMATS["deepseekv31"] = FORMATS["deepseekv3"]
FORMATS["qwen25"] = FORMATS["qwen"] = FORMATS["hermes"]


class ToolParser:
    """Per-request state of one format; `feed` per content piece, `finish` once."""

    __slots__ = (
        "after_call",
        "body",
        "count",
        "ender",
        "fmt",
        "held",
        "out",
        "pending",
        "section_ok",
        "state",
    )

    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.state = TEXT
        self.held = ""  # a possible marker prefix (TEXT / SECTION)
        self.pending = ""  # markup that a valid call drops and anything else releases
        self.body = ""  # the open call's text after its opener
        self.ender: Any = None
        self.section_ok = False  # a valid call was released in the current section
        self.after_call = False  # a valid call was released: whitespace may be markup
        self.count = 0
        # str (content) and ToolCallDelta items in output order, fresh per step
        self.out: list[str | ToolCallDelta] = []

    @property
    def markers(self) -> tuple[str, ...]:
        return self.fmt.markers

    def absorb(self, text: str) -> bool:
        """Inside a call, a piece that cannot start or finish its close marker only grows it."""
        close, reach = self.fmt.close_first, self.fmt.close_reach
        if self.state != CALL or close is None or close in text:
            return False
        body = self.body
        at = body.find(close, len(body) - reach)
        while at >= 0:  # a close marker under way at the end of the body?
            if self.fmt.close_marker.startswith(body[at:]):
                return False
            at = body.find(close, at + 1)
        self.body = ""
        body += text  # the only reference: CPython grows it in place
        self.body = body
        return True

    @property
    def idle(self) -> bool:
        """Nothing held and no markup context: a piece with no marker start may skip the engine."""
        return self.state == TEXT and not self.held and not self.pending and not self.after_call

    def step(self, text: str) -> list[str | ToolCallDelta]:
        """Run a piece through; return (and reset) the ordered output items."""
        out = self.out = []
        s = self.held + text if self.held else text
        self.held = ""
        while s:
            state = self.state
            if state == TEXT:
                s = self._text(s)
            elif state == SECTION:
                s = self._section(s)
            else:
                s = self._call(s)
        return out

    def flush(self) -> list[str | ToolCallDelta]:
        """End of output: an open call, held prefixes and non-blank markup become text."""
        out = self.out = []
        tail = self.pending if self.pending.strip() else ""
        if self.state == CALL:
            tail = self.pending + self.fmt.call_open + self.body
        tail += self.held
        if tail:
            out.append(tail)
        self.held = self.pending = self.body = ""
        self.state = TEXT
        return out

    # -- states: each consumes a prefix of s and returns the rest
    def _text(self, s: str) -> str:
        opener = self.fmt.opener
        at, m = opener.find(s)
        if at < 0:
            keep = opener.hold_from(s)
            self.held = s[keep:]
            self._stray(s[:keep], self.after_call)
            return ""
        self._stray(s[:at], self.after_call)
        if self.fmt.section is not None:
            self.state = SECTION
            self.pending += m
            self.section_ok = False
        else:
            self._open_call()
        return s[at + len(m):]

    def _section(self, s: str) -> str:
        markers = self.fmt.in_section
        assert markers is not None and self.fmt.section is not None
        at, m = markers.find(s)
        if at < 0:
            keep = markers.hold_from(s)
            self.held = s[keep:]
            self._stray(s[:keep], True)
            return ""
        self._stray(s[:at], True)
        if m == self.fmt.call_open:
            self._open_call()
        else:
            if not self.section_ok:
                self.out.append(self.pending + m)
            self.pending = ""
            self.state = TEXT
        return s[at + len(m):]

    def _open_call(self) -> None:
        self.state = CALL
        self.body = ""
        self.ender = self.fmt.make_end()

    def _call(self, s: str) -> str:
        body, self.body = self.body, ""
        body += s  # the only reference: CPython grows it in place, no copy per piece
        end_body, end_call = self.ender.end(body)
        if end_body < 0:
            self.body = body
            return ""
        self.ender = None
        self.state = SECTION if self.fmt.section is not None else TEXT
        try:
            calls = self.fmt.parse(body[:end_body])
        except RecursionError:  # JSON nested beyond the interpreter's depth: malformed
            calls = None
        if calls is None:
            self.out.append(self.pending + self.fmt.call_open + body[:end_call])
        else:
            out = self.out
            for name, arguments in calls:
                out.append(ToolCallDelta(self.count, name, arguments))
                self.count += 1
            self.section_ok = self.after_call = True
        self.pending = ""
        return body[end_call:]

    def _stray(self, t: str, markup: bool) -> None:
        """Text outside calls; in markup context, trailing whitespace waits as pending."""
        if not t:
            return
        if not markup:
            self.out.append(t)
            return
        j = len(t.rstrip())
        if j == 0:
            self.pending += t
            return
        self.out.append(self.pending + t[:j])
        self.pending = t[j:]

    # -- public, per-parser API
    def feed(self, text: str) -> ParsedDelta:
        return _delta(self.step(text))

    def finish(self) -> ParsedDelta:
        delta = _delta(self.flush())
        delta.ended_with_tool_calls = self.count > 0
        return delta

    def fresh(self) -> ToolParser:
        return ToolParser(self.fmt)

    def parse_full(self, text: str) -> ParsedDelta:
        """The batch reference: a fresh parser of the same format over the whole output."""
        fresh = self.fresh()
        items = fresh.step(text) + fresh.flush()
        delta = _delta(items)
        delta.ended_with_tool_calls = fresh.count > 0
        return delta


def _delta(items: list[str | ToolCallDelta]) -> ParsedDelta:
    if not items:
        return ParsedDelta()
    texts = [i for i in items if isinstance(i, str)]
    calls = [i for i in items if not isinstance(i, str)]
    return ParsedDelta("".join(texts), "", calls or None)
