"""qwen3_coder (Qwen3-Coder, Qwen3.5/3.6, Nemotron 3): the XML call format, schema-typed.

    <tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n...</function>\\n</tool_call>

Every value is text; its JSON type comes from the request's `tools` (`schema.convert`).
A value loses exactly one leading and one trailing newline (the template writes them;
SGLang's and vLLM's detectors strip the same). A value ends at `</parameter>`, or, as in
SGLang, at the next `<parameter=` or at `</function>` when the model left it unclosed.
Arguments are built as `json.dumps(dict)` would write them (`{"k": v, "k2": v2}`), in
the order written; a repeated parameter is written again (a client's JSON parser keeps
its last value). String values stream as generated; others leave when they close. Both
modes give the same bytes (whole mode runs this reader once over the call).
The model's reasoning parser is `qwen3`, which ends an open `<think>` at `<tool_call>`.
"""

from __future__ import annotations

import json
import re

from .markers import MarkerSet
from .schema import Schemas, convert, param_types
from .tools import CloseMarker, Event, ToolFormat, escape

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNC_END = "</function>"
PARAM_OPEN = "<parameter="
PARAM_END = "</parameter>"
_FUNC_HEAD = re.compile(r"\s*<function=([^>]+)>")
_PARAM_HEAD = re.compile(r"\s*<parameter=([^>]+)>")
_TAIL = re.compile(r"\s*</function>\s*")
_ENDS = MarkerSet([PARAM_END, PARAM_OPEN, FUNC_END])
# a streamed value is held only where it could be the start of an end (or the call's)
_HOLD = MarkerSet([PARAM_END, PARAM_OPEN, FUNC_END, CALL_CLOSE])

HEAD, PARAMS, VALUE, BAD = range(4)


class Qwen3CoderReader:
    __slots__ = ("count", "key", "name", "pos", "schemas", "sent", "start", "state", "types")

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.schemas = schemas
        self.state = HEAD
        self.pos = 0
        self.name = ""
        self.count = 0  # parameters written
        self.key = ""
        self.types: tuple[str, ...] = ()
        self.start = -1  # VALUE: where the value starts (after its stripped newline)
        # VALUE: how far a string value has been sent; for any value, no end of it can
        # start before this (the search for its end resumes here)
        self.sent = 0

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        pos = self.pos
        while True:
            st = self.state
            if st == HEAD:
                m = _FUNC_HEAD.match(body, 0, ready)
                if m is None:
                    break  # not yet (or never: then the call's close finds it malformed)
                self.name = m.group(1).strip()
                out.append((self.name, ""))
                pos = m.end()
                self.state = PARAMS
            elif st == PARAMS:
                m = _PARAM_HEAD.match(body, pos, ready)
                if m is None:
                    break
                self.key = m.group(1).strip()
                self.types = param_types(self.schemas, self.name, self.key)
                pos = m.end()
                self.start = -1
                self.state = VALUE
                if not self.types:  # a string: its key and quote leave now
                    out.append((None, self._lead() + '"'))
            elif st == VALUE:
                if self.start < 0:  # one leading newline is not part of the value
                    if pos >= ready:
                        break
                    self.start = self.sent = pos + 1 if body[pos] == "\n" else pos
                at, end = _ENDS.find(body, self.sent, ready)
                if at < 0:
                    if self.types:
                        self.sent = max(self.sent, ready - _ENDS.reach)
                    else:
                        hold = _HOLD.hold_from(body, self.sent, ready)
                        if hold > self.sent and body[hold - 1] == "\n":
                            hold -= 1  # could be the trailing newline the format strips
                        if hold > self.sent:
                            out.append((None, escape(body[self.sent:hold])))
                            self.sent = hold
                    break
                stop = at - 1 if at > self.start and body[at - 1] == "\n" else at
                if self.types:
                    out.append((None, self._lead() + convert(body[self.start:stop], self.types)))
                else:
                    out.append((None, escape(body[self.sent:stop]) + '"'))
                pos = at + len(end) if end == PARAM_END else at
                self.state = PARAMS
            else:
                break
        self.pos = pos
        return out

    def fast(self, at: int, text: str) -> str | None:
        """A piece with no `<` cannot end a value (a string's piece is all value unless it
        ends with the newline the format may strip); without `>` it cannot end a head."""
        if "<" in text:
            return None
        st = self.state
        if st == VALUE and self.start >= 0:
            if self.types:
                return ""
            if self.sent == at and not text.endswith("\n"):
                self.sent = at + len(text)
                return escape(text)
            return None
        if st in (HEAD, PARAMS) and ">" not in text:
            return ""
        return None

    def _lead(self) -> str:
        lead = "{" if self.count == 0 else ", "
        self.count += 1
        return lead + json.dumps(self.key, ensure_ascii=False) + ": "

    def close(self, body: str) -> list[Event] | None:
        if self.state != PARAMS or _TAIL.fullmatch(body, self.pos) is None:
            return None
        return [(None, "}" if self.count else "{}")]


def qwen3_coder() -> ToolFormat:
    return ToolFormat("qwen3_coder", CALL_OPEN, lambda: CloseMarker(CALL_CLOSE), None,
                      Qwen3CoderReader, inner=("<function=", FUNC_END, PARAM_OPEN, PARAM_END))
