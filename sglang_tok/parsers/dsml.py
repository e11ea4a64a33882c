"""DSML (DeepSeek V3.2 / V4): `<｜DSML｜invoke name="f">` with typed parameters or JSON.

A `string="true"` parameter's value is kept exactly (whitespace too: it may be file
content) and, in incremental mode, streams as it is generated (JSON-escaped, non-ASCII
kept); a `string="false"` value is JSON, or else kept as its raw string (as SGLang does),
and leaves when its parameter closes, serialised as whole mode serialises it, so both
modes give the same arguments. An invoke whose body is a JSON object passes it through
like the JSON formats.

What real output looks like, each handled here or in the engine:
- `<｜DSML｜invoke name="f"/>` (self-closing) is a call with `{}` (SGLang
  test_deepseekv4_detector / test_function_call_parser `test_self_closing_*`);
- an invoke without the `<｜DSML｜tool_calls>` wrapper is a call (SGLang
  `test_preamble_before_bare_invoke_without_wrapper`; the engine's `unwrapped`);
- a damaged wrapper (`<｜DSML｜toolcalls>`, no `>`, stray words on its line: vLLM #51914,
  #56141) is markup when a call follows (the engine's `loose`);
- DSML inside a Markdown code fence or inline code span is text (the engine's `quotes`);
- a repeated parameter is written twice, in order: `{"a": "1", "a": "2"}`. A value
  already streamed cannot be taken back, and holding every string until its invoke
  closes would end streaming; JSON parsers (Python's json, JavaScript's JSON.parse, Go's
  encoding/json) keep the last value, which is SGLang's result (its dict keeps the last).
  Whole mode writes the same bytes, so stream == batch.
"""

from __future__ import annotations

import re

from .json_readers import RawArgs, arguments_json
from .jsonio import dumps, escape, json_string, loads
from .markers import MarkerSet
from .readers import Call, Calls, Event, Opened, Step, run_states
from .schema import Schemas
from .tool_format import CloseMarker, ToolFormat

DSML = "｜DSML｜"
PARAM_OPEN = f"<{DSML}parameter"
PARAM_CLOSE = f"</{DSML}parameter>"
INVOKE_CLOSE = f"</{DSML}invoke>"
_INVOKE_HEAD = re.compile(r'\s+name="([^"]+)"\s*(/?)>')
# a body that may still become a self-closing head (the call then ends at its `/>`)
_HEAD_PREFIX = re.compile(r'\s*(?:n(?:a(?:m(?:e(?:=(?:"(?:[^"]*(?:"\s*/?)?)?)?)?)?)?)?)?')
_PARAM_HEAD = re.compile(r'\s*<' + DSML + r'parameter\s+name="([^"]+)"\s+string="(true|false)"\s*>')
_PARAM = re.compile(_PARAM_HEAD.pattern + r'(.*?)</' + DSML + r'parameter>', re.DOTALL)
_WS = re.compile(r"\s*")
# a string value is held only where it could be the start of its close (or the call's)
_VALUE_END = MarkerSet([PARAM_CLOSE, INVOKE_CLOSE])


# values common enough to skip json's parse and dump: a decimal int of at most 18 digits
# (no leading zero, so always JSON) and the constants, JSON's blanks around them; each is
# its own re-serialisation
_SIMPLE = re.compile(r"[ \t\n\r]*(0|-?[1-9][0-9]{0,17}|true|false|null)[ \t\n\r]*")


def _json_or_raw(value: str) -> str:
    """A `string="false"` value: its JSON re-serialised, or else the raw text as a string."""
    m = _SIMPLE.fullmatch(value)
    if m is not None:
        return m.group(1)
    try:
        return dumps(loads(value))
    except (ValueError, RecursionError):
        return json_string(value)


def parse_dsml_invoke(body: str) -> Calls | None:
    """`<｜DSML｜invoke` + ` name="f">` then a JSON object or DSML parameters; or
    ` name="f"/>`, a call without arguments."""
    head = _INVOKE_HEAD.match(body)
    if head is None:
        return None
    inner = body[head.end():]
    if head.group(2):
        return None if inner.strip() else [Call(head.group(1), "{}")]
    try:
        if inner.lstrip().startswith("{"):
            text = arguments_json(loads(inner))
            return None if text is None else [Call(head.group(1), text)]
    except ValueError:
        return None
    members: list[str] = []
    pos = 0
    while (m := _PARAM.match(inner, pos)) is not None:
        key, is_string, value = m.groups()
        members.append(json_string(key) + ": " + (
            json_string(value) if is_string == "true" else _json_or_raw(value)))
        pos = m.end()
    if inner[pos:].strip():
        return None
    return [Call(head.group(1), "{" + ", ".join(members) + "}")]


class DsmlEnd(CloseMarker):
    """An invoke ends at `</｜DSML｜invoke>`, or at the `/>` of a self-closing head."""

    __slots__ = ("settled",)
    head_stop = ">"  # a head ends at its `>`; `_HEAD_PREFIX` fails only at a character
    # a head cannot hold, and it waits for the next `end`, as the match of a `/>` does

    def __init__(self) -> None:
        super().__init__(INVOKE_CLOSE)
        self.settled = False  # the head can no longer be self-closing

    def end(self, body: str) -> tuple[int, int]:
        if not self.settled:
            m = _INVOKE_HEAD.match(body)
            if m is not None:
                if m.group(2):
                    return m.end(), m.end()
                self.settled = True
            elif _HEAD_PREFIX.fullmatch(body) is None:
                self.settled = True
        # CloseMarker.end, inlined (once per piece inside a call)
        at = body.find(INVOKE_CLOSE, self.scan)
        if at < 0:
            self.scan = max(0, len(body) - len(INVOKE_CLOSE) + 1)
            return -1, -1
        return at, at + len(INVOKE_CLOSE)


HEAD, BODY, PARAMS, STRING, JSONVAL, RAW, BAD, EMPTY = range(8)


class DsmlReader:
    __slots__ = ("keys", "pos", "raw", "sent", "state")
    # `sent`: in a value, how far a string was sent; no end of the value starts before it

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.state = HEAD
        self.pos = 0
        self.sent = 0  # STRING: how far the value has been sent
        self.keys: set[str] = set()
        self.raw: RawArgs | None = None

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        self.pos = run_states(_STEPS, self, body, self.pos, ready, out, 0, RAW)
        return out

    # -- states (`run_states`): each returns where reading goes on, or `~` where it stops
    def _head(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """HEAD: the invoke's ` name="f">` (or `/>`: a call without arguments)."""
        m = _INVOKE_HEAD.match(body, 0, ready)
        if m is None:
            return ~pos
        out.append(Opened(m.group(1)))
        self.state = EMPTY if m.group(2) else BODY
        return m.end()

    def _body(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """BODY: a JSON object (passed through) or DSML parameters, by its first
        non-blank character."""
        j = _WS.match(body, pos, ready).end()  # type: ignore[union-attr]
        if j >= ready:
            return ~pos
        if body[j] == "{":
            self.raw = RawArgs(j)
            self.state = RAW
        else:
            self.state = PARAMS
        return pos

    def _raw(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """RAW: the JSON object, as far as it is scanned."""
        assert self.raw is not None
        frag = self.raw.read(body, ready)
        if frag:
            out.append(frag)
        return ~pos

    def _params(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """PARAMS: a parameter's head; its key leaves (a string's with its quote)."""
        m = _PARAM_HEAD.match(body, pos, ready)
        if m is None:
            return ~pos  # not yet (or never: then the call's close finds it malformed)
        key, is_string = m.groups()
        lead = "{" if not self.keys else ", "  # a repeated key is written again
        self.keys.add(key)
        pos = self.sent = m.end()
        if is_string == "true":
            out.append(lead + json_string(key) + ': "')
            self.state = STRING
        else:
            out.append(lead + json_string(key) + ": ")
            self.state = JSONVAL
        return pos

    def _string(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """STRING: the value streams, but for what could start its close (or the call's)."""
        at = body.find(PARAM_CLOSE, self.sent, ready)
        if at < 0:
            hold = _VALUE_END.hold_from(body, self.sent, ready)
            if hold > self.sent:
                out.append(escape(body[self.sent:hold]))
                self.sent = hold
            return ~pos
        out.append(escape(body[self.sent:at]) + '"')
        self.state = PARAMS
        return at + len(PARAM_CLOSE)

    def _json(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """JSONVAL: the value leaves whole when its parameter closes."""
        at = body.find(PARAM_CLOSE, self.sent, ready)
        if at < 0:
            self.sent = max(self.sent, ready - len(PARAM_CLOSE) + 1)
            return ~pos
        out.append(_json_or_raw(body[pos:at]))
        self.state = PARAMS
        return at + len(PARAM_CLOSE)

    def fast(self, at: int, text: str) -> str | None:
        """A piece without `>` cannot end a head (a `<` in it included: a head needs its
        `>`, and a part held for a possible close marker never holds one); with no `<`
        it cannot end a value."""
        st = self.state
        if st in (HEAD, PARAMS) and ">" not in text:
            return ""
        if "<" in text:
            return None
        if st == STRING and self.sent == at:
            self.sent = at + len(text)
            return escape(text)
        if st == JSONVAL:
            return ""
        return None

    def waits(self, text: str) -> bool:
        """A head (the invoke's, a parameter's) ends only at a `>` (never in a held
        prefix of the end marker): without one, `read` gives nothing."""
        st = self.state
        return (st == HEAD or st == PARAMS) and ">" not in text

    def close(self, body: str) -> list[Event] | None:
        if parse_dsml_invoke(body) is None:
            return None
        if self.state == EMPTY:
            return ["{}"]
        if self.state == RAW:
            assert self.raw is not None
            tail = self.raw.after(body)
            if tail is None or tail.strip():
                return None
            return [self.raw.rest(body)]
        if self.state not in (BODY, PARAMS) or body[self.pos:].strip():
            return None
        return ["}" if self.keys else "{}"]


# by state: HEAD, BODY, PARAMS, STRING, JSONVAL, RAW (BAD and EMPTY read nothing)
_STEPS: tuple[Step[DsmlReader], ...] = (
    DsmlReader._head, DsmlReader._body, DsmlReader._params, DsmlReader._string,
    DsmlReader._json, DsmlReader._raw)


def dsml(name: str, section: str) -> ToolFormat:
    return ToolFormat(name, f"<{DSML}invoke", DsmlEnd, parse_dsml_invoke, DsmlReader,
                      (f"<{DSML}{section}>", f"</{DSML}{section}>"), (PARAM_OPEN, PARAM_CLOSE),
                      unwrapped=True, loose=(f"<{DSML}", f"</{DSML}"), quotes=True)
