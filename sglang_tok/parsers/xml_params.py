"""Schema-typed XML call formats: one reader, a small grammar per format.

qwen3_coder, glm45/glm47 and minimax_m2 all write a call as a name, then parameters
whose values are text typed by the request's `tools` (`schema.convert`). What differs is
only the grammar, which an `XmlGrammar` states:
- `head(body, ready)`: the call's name and where it ends, None while it is not certain
  (a name "" makes the call malformed);
- `param`: a regex for a parameter's head (group 1 is its key, stripped), matched where
  the previous parameter (or the name) ended;
- `ends`: the markers that end a value; `consume` is the one that belongs to the value
  (the others stay, for the next parameter's head or the call's tail);
- `strip`: the newlines a value loses at its start and end (none, exactly one, or all);
- `tail`: what may follow the last parameter (a regex matched to the end of the body);
- `bare_name(body)`: for formats where a call may be only its name, the name of such a
  complete body (None: malformed);
- `convert`: the schema conversion of a non-string value (default `schema.convert`).

The reader builds `{"k": v, "k2": v2}` as `json.dumps` writes it, in the order written
(a repeated key is written again; a client's JSON parser keeps its last value). A string
value streams as it is generated, JSON-escaped, holding back only what could be the start
of an end marker (or of the call's) and the newlines the format may strip; other values
leave when they close. Whole mode runs the same reader once, so both modes give the same
bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .jsonio import escape, json_string
from .markers import MarkerSet
from .readers import Event, Opened, Step, run_states
from .schema import Schemas, convert, param_types

HEAD, PARAMS, VALUE, BAD = range(4)
STRIP_NONE, STRIP_ONE, STRIP_ALL = range(3)
_NEWLINES = re.compile(r"\n*")

Head = Callable[[str, int], tuple[str, int] | None]


def regex_head(pattern: re.Pattern[str]) -> Head:
    """A name written inside a tag: group 1 of `pattern` matched at the body's start."""
    def head(body: str, ready: int) -> tuple[str, int] | None:
        m = pattern.match(body, 0, ready)
        return None if m is None else (m.group(1).strip(), m.end())
    return head


class XmlGrammar:
    __slots__ = ("bare_name", "consume", "convert", "ends", "fast_stops", "head", "hold",
                 "param", "strip", "tail")

    def __init__(self, head: Head, param: re.Pattern[str], ends: list[str], consume: str,
                 call_close: str, strip: int, tail: re.Pattern[str],
                 fast_stops: str = ">", bare_name: Callable[[str], str | None] | None = None,
                 convert: Callable[[str, tuple[str, ...]], str] = convert) -> None:
        self.head = head
        self.param = param
        self.ends = MarkerSet(ends)
        self.consume = consume
        # a streamed string is held only where it could be the start of an end (or the call's)
        self.hold = MarkerSet([*ends, call_close])
        self.strip = strip
        self.tail = tail
        # a piece without these cannot complete a head or a parameter's head: each ends
        # with one (a part held for a possible end marker never holds one: an end marker's
        # only `>` is its last character)
        self.fast_stops = re.compile("[" + re.escape(fast_stops) + "]")
        self.bare_name = bare_name
        self.convert = convert


class XmlParamsReader:
    """The `CallReader` of every schema-typed XML format (see the module docstring)."""

    __slots__ = ("count", "g", "key", "name", "pos", "schemas", "sent", "start", "state",
                 "types")

    def __init__(self, grammar: XmlGrammar, schemas: Schemas | None = None) -> None:
        self.g = grammar
        self.schemas = schemas
        self.state = HEAD
        self.pos = 0
        self.name = ""
        self.count = 0  # parameters written
        self.key = ""
        self.types: tuple[str, ...] = ()
        self.start = -1  # VALUE: where the value starts (after its stripped newlines)
        # VALUE: how far a string value has been sent; for any value, no end of it can
        # start before this (the search for its end resumes here)
        self.sent = 0

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        self.pos = run_states(_STEPS, self, body, self.pos, ready, out, 0, VALUE)
        return out

    # -- states (`run_states`): each returns where reading goes on, or `~` where it stops
    def _head(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """HEAD: the call's name, once the grammar's `head` is certain of it."""
        h = self.g.head(body, ready)
        if h is None:
            return ~pos  # not yet (or never: then the call's close decides)
        self.name, pos = h
        if not self.name:
            self.state = BAD
            return ~pos
        out.append(Opened(self.name))
        self.state = PARAMS
        return pos

    def _param(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """PARAMS: a parameter's head; a string's key and quote leave now (its value
        streams), another value's key with the value."""
        m = self.g.param.match(body, pos, ready)
        if m is None:
            return ~pos
        self.key = m.group(1).strip()
        self.types = param_types(self.schemas, self.name, self.key)
        self.start = -1
        self.state = VALUE
        if not self.types:
            out.append(self._lead() + '"')
        return m.end()

    def _value(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """VALUE: to one of the grammar's ends; a string streams as far as no end (nor a
        newline the format strips) can start."""
        g = self.g
        if self.start < 0:  # the newlines a value starts with are not part of it
            if g.strip == STRIP_ALL:
                j = _NEWLINES.match(body, pos, ready).end()  # type: ignore[union-attr]
                if j >= ready:
                    return ~pos
            elif g.strip == STRIP_ONE:
                if pos >= ready:
                    return ~pos
                j = pos + 1 if body[pos] == "\n" else pos
            else:
                j = pos
            self.start = self.sent = j
        at, end = g.ends.find(body, self.sent, ready)
        if at < 0:
            if self.types:
                self.sent = max(self.sent, ready - g.ends.reach)
            else:
                hold = g.hold.hold_from(body, self.sent, ready)
                hold = self._unstrip(body, self.sent, hold)  # could be stripped
                if hold > self.sent:
                    out.append(escape(body[self.sent:hold]))
                    self.sent = hold
            return ~pos
        stop = self._unstrip(body, self.start, at)
        if self.types:
            out.append(self._lead() + g.convert(body[self.start:stop], self.types))
        else:
            out.append(escape(body[self.sent:stop]) + '"')
        self.state = PARAMS
        return at + len(end) if end == g.consume else at

    def _unstrip(self, body: str, lo: int, hi: int) -> int:
        """`hi` moved back over the trailing newlines the format strips (not before `lo`)."""
        strip = self.g.strip
        if strip == STRIP_ONE:
            return hi - 1 if hi > lo and body[hi - 1] == "\n" else hi
        if strip == STRIP_ALL:
            while hi > lo and body[hi - 1] == "\n":
                hi -= 1
        return hi

    def fast(self, at: int, text: str) -> str | None:
        """A piece with no `<` cannot end a value (a string's piece is all value unless it
        ends with a newline the format may strip); a piece without the grammar's
        `fast_stops` cannot end a head or a parameter's head (`<` in it or not)."""
        st = self.state
        if st == VALUE:
            if self.start < 0 or "<" in text:
                return None
            if self.types:
                return ""
            if self.sent == at and (self.g.strip == STRIP_NONE or not text.endswith("\n")):
                self.sent = at + len(text)
                return escape(text)
            return None
        if (st == HEAD or st == PARAMS) and self.g.fast_stops.search(text) is None:
            return ""
        return None

    def waits(self, text: str) -> bool:
        """A head (the call's, a parameter's) ends only at one of the grammar's
        `fast_stops` (never in a held prefix of the end marker): without one, `read`
        gives nothing."""
        st = self.state
        return (st == HEAD or st == PARAMS) and self.g.fast_stops.search(text) is None

    def _lead(self) -> str:
        lead = "{" if self.count == 0 else ", "
        self.count += 1
        return lead + json_string(self.key) + ": "

    def close(self, body: str) -> list[Event] | None:
        g = self.g
        if self.state == HEAD and g.bare_name is not None:
            name = g.bare_name(body)
            return None if not name else [Opened(name), "{}"]
        if self.state != PARAMS or g.tail.fullmatch(body, self.pos) is None:
            return None
        return ["}" if self.count else "{}"]


# by state: HEAD, PARAMS, VALUE (BAD reads nothing)
_STEPS: tuple[Step[XmlParamsReader], ...] = (
    XmlParamsReader._head, XmlParamsReader._param, XmlParamsReader._value)
