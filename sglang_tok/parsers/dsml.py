"""DSML (DeepSeek V3.2 / V4): `<｜DSML｜invoke name="f">` with typed parameters or JSON.

A `string="true"` parameter's value is kept exactly (whitespace too: it may be file
content) and, in incremental mode, streams as it is generated (JSON-escaped, non-ASCII
kept); a `string="false"` value must be JSON and leaves when its parameter closes,
serialised as whole mode serialises it, so both modes give the same arguments. An invoke
whose body is a JSON object passes it through like the JSON formats.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .markers import MarkerSet
from .schema import Schemas
from .tools import Calls, CloseMarker, Event, RawArgs, ToolFormat, arguments_json, escape, loads

DSML = "｜DSML｜"
PARAM_OPEN = f"<{DSML}parameter"
PARAM_CLOSE = f"</{DSML}parameter>"
INVOKE_CLOSE = f"</{DSML}invoke>"
_INVOKE_HEAD = re.compile(r'\s+name="([^"]+)"\s*>')
_PARAM_HEAD = re.compile(r'\s*<' + DSML + r'parameter\s+name="([^"]+)"\s+string="(true|false)"\s*>')
_PARAM = re.compile(_PARAM_HEAD.pattern + r'(.*?)</' + DSML + r'parameter>', re.DOTALL)
_WS = re.compile(r"\s*")
# a string value is held only where it could be the start of its close (or the call's)
_VALUE_END = MarkerSet([PARAM_CLOSE, INVOKE_CLOSE])


def parse_dsml_invoke(body: str) -> Calls | None:
    """`<｜DSML｜invoke` + ` name="f">` then a JSON object or DSML parameters."""
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


HEAD, BODY, PARAMS, STRING, JSONVAL, RAW, BAD = range(7)


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
        pos = self.pos
        while True:
            st = self.state
            if st == HEAD:
                m = _INVOKE_HEAD.match(body, 0, ready)
                if m is None:
                    break
                out.append((m.group(1), ""))
                pos = m.end()
                self.state = BODY
            elif st == BODY:
                j = _WS.match(body, pos, ready).end()  # type: ignore[union-attr]
                if j >= ready:
                    break
                if body[j] == "{":
                    self.raw = RawArgs(j)
                    self.state = RAW
                else:
                    self.state = PARAMS
            elif st == RAW:
                assert self.raw is not None
                frag = self.raw.read(body, ready)
                if frag:
                    out.append((None, frag))
                break
            elif st == PARAMS:
                m = _PARAM_HEAD.match(body, pos, ready)
                if m is None:
                    break  # not yet (or never: then the call's close finds it malformed)
                key, is_string = m.groups()
                if key in self.keys:
                    self.state = BAD  # whole mode refuses a repeated parameter too
                    break
                lead = "{" if not self.keys else ", "
                self.keys.add(key)
                pos = self.sent = m.end()
                if is_string == "true":
                    out.append((None, lead + json.dumps(key, ensure_ascii=False) + ': "'))
                    self.state = STRING
                else:
                    out.append((None, lead + json.dumps(key, ensure_ascii=False) + ": "))
                    self.state = JSONVAL
            elif st == STRING:
                at = body.find(PARAM_CLOSE, self.sent, ready)
                if at < 0:
                    hold = _VALUE_END.hold_from(body, self.sent, ready)
                    if hold > self.sent:
                        out.append((None, escape(body[self.sent:hold])))
                        self.sent = hold
                    break
                out.append((None, escape(body[self.sent:at]) + '"'))
                pos = at + len(PARAM_CLOSE)
                self.state = PARAMS
            elif st == JSONVAL:
                at = body.find(PARAM_CLOSE, self.sent, ready)
                if at < 0:
                    self.sent = max(self.sent, ready - len(PARAM_CLOSE) + 1)
                    break
                try:
                    value = loads(body[pos:at])
                except (ValueError, RecursionError):
                    self.state = BAD
                    break
                out.append((None, json.dumps(value, ensure_ascii=False)))
                pos = at + len(PARAM_CLOSE)
                self.state = PARAMS
            else:
                break
        self.pos = pos
        return out

    def fast(self, at: int, text: str) -> str | None:
        """A piece with no `<` cannot end a value; without `>` it cannot end a head."""
        if "<" in text:
            return None
        st = self.state
        if st == STRING and self.sent == at:
            self.sent = at + len(text)
            return escape(text)
        if st == JSONVAL or (st in (HEAD, PARAMS) and ">" not in text):
            return ""
        return None

    def close(self, body: str) -> list[Event] | None:
        if parse_dsml_invoke(body) is None:
            return None
        if self.state == RAW:
            assert self.raw is not None
            if self.raw.end < 0 or body[self.raw.end:].strip():
                return None
            return [(None, self.raw.rest(body))]
        if self.state not in (BODY, PARAMS) or body[self.pos:].strip():
            return None
        return [(None, "}" if self.keys else "{}")]


def dsml(name: str, section: str) -> ToolFormat:
    return ToolFormat(name, f"<{DSML}invoke", lambda: CloseMarker(INVOKE_CLOSE),
                      parse_dsml_invoke, DsmlReader,
                      (f"<{DSML}{section}>", f"</{DSML}{section}>"), (PARAM_OPEN, PARAM_CLOSE))
