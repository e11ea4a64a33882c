"""Formats whose calls carry the model's own JSON: hermes/qwen25, mistral, deepseekv3/v31.

A hermes `<tool_call>` may hold a JSON array of calls (`CallArray`): a malformed element
costs only itself, because models that batch calls this way should not lose every call
to one bad sibling (SGLang keeps the valid ones too).

Whole mode re-serialises the parsed arguments. Incremental mode passes
the arguments object through exactly as the model wrote it (no re-serialisation, so no
escaping or key-order drift: vLLM #13826, #46308), found by scanning the call's JSON
member by member; validity is still decided by the same whole parse when the call ends.
A repeated `name` or `arguments`/`parameters` key is malformed in incremental mode (the
first one was already sent; json.loads would keep the last).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .json_readers import JsonEnd, JsonValueEnd, RawArgs, arguments_json
from .jsonio import loads
from .readers import Call, Calls, Dropped, Event, HeadFirst, Opened, Step, fold, run_states
from .schema import Schemas
from .tool_format import CloseMarker, ToolFormat

_WS = re.compile(r"\s*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR_END = re.compile(r"[\s,\]}]")
# a JSON string with no escape and no control character: its value is its inside
_PLAIN_STRING = re.compile(r'"[^"\\\x00-\x1f]*"')


def _string_value(token: str) -> Any:
    """`json.loads` of a `_STRING` match (a key, a name), without the decoder for the
    common token that has nothing to decode."""
    if _PLAIN_STRING.fullmatch(token) is not None:
        return token[1:-1]
    return json.loads(token)
ARG_KEYS = ("arguments", "parameters")

# the states that start at a non-blank character first (`run_states`)
OPEN, KEY, VALUE, AFTER, SKIP, ARGS, DONE, BAD = range(8)


class CallObject:
    """One `{"name": ..., "arguments": {...}}` object, read member by member as it grows.

    The name is sent once its string is complete; the arguments object streams (through
    `RawArgs`) once the name is known, whatever the key order.
    """

    __slots__ = ("args", "end", "first", "key", "named", "pos", "seen", "skip", "state",
                 "unsent")

    def __init__(self, start: int) -> None:
        self.pos = start
        self.state = OPEN
        self.key = ""
        self.first = True
        self.seen: set[str] = set()
        self.args: RawArgs | None = None
        self.skip: JsonEnd | None = None
        self.named = False
        # arguments scanned before the name was known, in pieces (joined once it is)
        self.unsent: list[str] = []
        self.end = -1

    def read(self, body: str, ready: int, out: list[Event]) -> None:
        self.pos = run_states(_OBJECT_STEPS, self, body, self.pos, ready, out, SKIP, ARGS)

    # -- states (`run_states`): each returns where reading goes on, or `~` where it stops
    def _open(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """OPEN: the object's `{`."""
        if body[pos] != "{":
            self.state = BAD
            return ~pos
        self.state = KEY
        return pos + 1

    def _key(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """KEY: a member's key and its colon (read again whole until the colon is there),
        or an empty object's `}`."""
        c = body[pos]
        if c == "}" and self.first:
            self.end = pos + 1
            self.state = DONE
            return ~(pos + 1)
        m = _STRING.match(body, pos, ready) if c == '"' else None
        if m is None:
            if c != '"':
                self.state = BAD
            return ~pos
        j = _WS.match(body, m.end(), ready).end()  # type: ignore[union-attr]
        if j >= ready:
            return ~pos  # the colon has not arrived yet: read the key again then
        if body[j] != ":":
            self.state = BAD
            return ~pos
        try:
            key = _string_value(m.group())
        except ValueError:
            self.state = BAD
            return ~pos
        k = "arguments" if key in ARG_KEYS else key
        if k in self.seen and k in ("name", "arguments"):
            self.state = BAD
            return ~pos
        self.seen.add(k)
        self.key = key
        self.first = False
        self.state = VALUE
        return j + 1

    def _value(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """VALUE: the member's value; the name leaves once its string is complete, and
        with it the arguments scanned before it."""
        key = self.key
        c = body[pos]
        if key in ARG_KEYS:
            if c != "{":
                self.state = BAD  # arguments that are not an object are malformed
                return ~pos
            self.args = RawArgs(pos)
            self.state = ARGS
            return pos
        if c in "{[":
            self.skip = JsonEnd(pos)
            self.state = SKIP
            return pos
        if c == '"':
            m = _STRING.match(body, pos, ready)
            if m is None:
                return ~pos  # wait for the string's end
            if key == "name":
                try:
                    name = _string_value(m.group())
                except ValueError:
                    name = None
                if not isinstance(name, str) or not name:
                    self.state = BAD
                    return ~pos
                self.named = True
                out.append(Opened(name))
                if self.unsent:
                    out.append("".join(self.unsent))
                    self.unsent = []
            self.state = AFTER
            return m.end()
        if key == "name":
            self.state = BAD
            return ~pos
        m2 = _SCALAR_END.search(body, pos, ready)
        if m2 is None:
            return ~pos
        self.state = AFTER
        return m2.start()

    def _after(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """AFTER a member: the next one's `,`, or the object's `}`."""
        c = body[pos]
        if c == ",":
            self.state = KEY
            return pos + 1
        if c == "}":
            self.end = pos + 1
            self.state = DONE
            return pos + 1
        self.state = BAD
        return ~pos

    def _skip_value(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """SKIP: an object or array value of another key, to its end."""
        assert self.skip is not None
        e = self.skip.end(body, ready)
        if e < 0:
            return ~pos
        self.state = AFTER
        return e

    def _args(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """ARGS: the arguments object streams, once the name has left (before, it is
        kept: the name may still be malformed or rejected)."""
        args = self.args
        assert args is not None
        frag = args.read(body, ready)
        if self.named:
            if frag:
                out.append(frag)
        elif frag:
            self.unsent.append(frag)
        if args.end < 0:
            return ~pos
        self.state = AFTER
        return args.end

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read` (`readers.FastPath`): its arguments' `RawArgs.fast`
        while they stream (its name sent), else None."""
        args = self.args
        return args.fast if self.state == ARGS and self.named and args is not None else None

    def rest(self, body: str) -> str:
        """The call's last fragment (its object is done): the held brace, or `{}`."""
        if self.args is None:
            return "{}"
        return self.args.rest(body)


_OBJECT_STEPS: tuple[Step[CallObject], ...] = (
    CallObject._open, CallObject._key, CallObject._value, CallObject._after,
    CallObject._skip_value, CallObject._args)


# ------------------------------------------------------------------ hermes / qwen25
def parse_name_arguments(obj: Any) -> Call | None:
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    text = arguments_json(args)
    return None if text is None else Call(name, text)


def parse_hermes(body: str) -> Calls | None:
    try:
        call = parse_name_arguments(loads(body))
    except ValueError:
        return None
    return None if call is None else [call]


def valid_hermes(body: str) -> bool:
    """`parse_hermes(body) is not None`, without re-serialising the arguments (the
    incremental reader sends the model's own text; only validity is asked at the close):
    every loaded value serialises, so validity is the load and the shape. A deeply nested
    body takes `parse_hermes` itself (its serialisation could hit the recursion limit)."""
    if body.count("{") + body.count("[") > 64:
        return parse_hermes(body) is not None
    try:
        obj = loads(body)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    name = obj.get("name")
    return isinstance(name, str) and bool(name) and \
        isinstance(obj.get("arguments", obj.get("parameters", {})), dict)


def parse_hermes_typed(body: str, schemas: Schemas | None) -> Calls | None:
    """Whole mode: one object as `parse_hermes`; an array by the incremental reader's own
    element rules (so both modes agree on which elements stand), arguments re-serialised."""
    if not body.lstrip().startswith("["):
        return parse_hermes(body)
    reader = HermesReader(schemas)
    events = reader.read(body, len(body))
    rest = reader.close(body)
    if rest is None:
        return None
    calls: Calls = []
    for item in fold(events + rest):
        if isinstance(item, Call):
            text = arguments_json(loads(item.arguments))
            assert text is not None  # the reader lets only a valid object stand
            item = Call(item.name, text)
        calls.append(item)
    return calls


class HermesReader:
    """`<tool_call>` + one JSON object + `</tool_call>`, or a JSON array of such objects
    (`CallArray`)."""

    piece_fast = True  # `fast` is `RawArgs.fast`: its own state and the piece

    __slots__ = ("array", "obj", "schemas")

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.obj: CallObject | None = None
        self.array: CallArray | None = None
        self.schemas = schemas

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        if self.array is not None:
            self.array.read(body, ready, out)
            return out
        if self.obj is None:
            pos = _WS.match(body, 0, ready).end()  # type: ignore[union-attr]
            if pos >= ready:
                return out
            if body[pos] == "[":
                self.array = CallArray(pos + 1, self.schemas)
                self.array.read(body, ready, out)
                return out
            self.obj = CallObject(pos)
        self.obj.read(body, ready, out)
        return out

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read`: the named call's `RawArgs.fast` (which gives None
        once its object ends), or None."""
        obj = self.obj if self.array is None else self.array.live()
        return None if obj is None else obj.fast_now()

    def close(self, body: str) -> list[Event] | None:
        if self.array is not None:
            return self.array.close(body)
        obj = self.obj
        if obj is None or obj.state != DONE or not obj.named or body[obj.end:].strip() \
                or not valid_hermes(body):
            return None
        return [obj.rest(body)]


# the states that start at a non-blank character first (`run_states`)
A_START, A_AFTER, A_END, A_OBJ, A_VALUE, A_BAD, A_TAIL = range(7)
_NEXT_OBJECT = re.compile(r",\s*\{")


class CallArray:
    """The elements of a `[...]` of call objects, each a call of its own.

    An element that is not a well-formed call (bad JSON, not an object, no name, a name
    not in the request's tools) costs only itself: it becomes a `Dropped` piece of text
    and the next element is read as usual. Element boundaries: a complete JSON value
    ends an element; once an object can no longer be a call object, its text runs to the
    next `,` + `{` (the next element's start) or to the array's `]` at the end of the body.
    Text after the `]` is one more malformed piece. A well-formed element's closing brace
    leaves when it ends: its validity is final then, whatever its siblings do.
    """

    __slots__ = ("dropped", "elem", "obj", "pos", "prev_end", "rejected", "scan", "schemas",
                 "state", "valid", "value")

    def __init__(self, pos: int, schemas: Schemas | None) -> None:
        self.pos = pos  # where reading resumes
        self.state = A_START
        self.elem = -1  # where the current element (or malformed piece) starts
        self.obj: CallObject | None = None
        self.value: JsonEnd | None = None  # a non-object element that is an array
        self.scan = 0  # A_BAD: where the search for the next element resumes
        self.rejected = False  # the current element's name is not in the request's tools
        self.prev_end = 0  # where the previous element (or malformed piece) ended
        self.dropped = False  # a malformed piece was given back already
        self.valid = 0  # elements that stand
        self.schemas = schemas

    def live(self) -> CallObject | None:
        """The element being read when it is a call whose name was sent."""
        return self.obj if self.state == A_OBJ and not self.rejected else None

    def read(self, body: str, ready: int, out: list[Event]) -> None:
        self.pos = run_states(_ARRAY_STEPS, self, body, self.pos, ready, out, A_OBJ, A_BAD)

    # -- states (`run_states`): each returns where reading goes on, or `~` where it stops
    def _start(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """A_START: an element (or an empty array's `]`)."""
        c = body[pos]
        if c == "]" and self.elem < 0:
            self.state = A_END  # `[]`: no call at all
            return pos + 1
        if c in ",]":
            self.elem = self.scan = pos
            self.state = A_BAD
        else:
            self._element(body, pos)
        return pos

    def _after(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """A_AFTER an element: `,` and the next, or the array's `]`."""
        c = body[pos]
        if c == ",":
            self.state = A_START
            return pos + 1
        if c == "]":
            self.state = A_END
            return pos + 1
        self.elem = self.scan = pos
        self.state = A_BAD
        return pos

    def _end(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """A_END: text after the array is malformed, to the body's end (A_TAIL)."""
        self.elem = pos
        self.state = A_TAIL
        return ~pos

    def _obj(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """A_OBJ: an object element, read as a call; a name not in the request's tools
        makes it text (its events are not sent, and it is read on only to find its end)."""
        obj = self.obj
        assert obj is not None
        if self.rejected:
            obj.read(body, ready, [])
        else:
            events: list[Event] = []
            obj.read(body, ready, events)
            for ev in events:
                if isinstance(ev, Opened) and self.schemas is not None \
                        and ev.name not in self.schemas:
                    self.rejected = True  # never sent: the element is text
                    break
                out.append(ev)
        if obj.state == DONE:
            pos = obj.end
            if obj.named and not self.rejected and valid_hermes(body[self.elem:pos]):
                out.append(obj.rest(body))
                self.obj = None
                self.valid += 1
                self.prev_end = pos
            else:
                self._drop(body, pos, out)
            self.state = A_AFTER
            return pos
        if obj.state == BAD:
            self.state = A_BAD
            self.scan = obj.pos
            return obj.pos
        return ~pos

    def _other(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """A_VALUE: an element that is not an object, malformed once it ends."""
        end = self._value_end(body, ready)
        if end < 0:
            return ~pos
        self._drop(body, end, out)
        self.state = A_AFTER
        return end

    def _bad(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """A_BAD: a malformed element's text runs to the next element's `,` + `{`."""
        m = _NEXT_OBJECT.search(body, max(self.elem, self._back(body, self.scan)), ready)
        if m is None:
            self.scan = max(self.scan, ready)
            return ~pos
        self._drop(body, m.start(), out)
        pos = m.end() - 1
        self._element(body, pos)
        return pos

    @staticmethod
    def _back(body: str, at: int) -> int:
        """The search for `,{` starts at the comma before `at` when only blanks are between
        (an object that went bad at its `{` after a comma: that `{` opens the next one)."""
        j = at
        while j > 0 and body[j - 1] in " \t\r\n":
            j -= 1
        return j - 1 if j > 0 and body[j - 1] == "," else at

    def _element(self, body: str, pos: int) -> None:
        self.elem = pos
        self.rejected = False
        if body[pos] == "{":
            self.obj = CallObject(pos)
            self.state = A_OBJ
        else:
            self.obj = None
            self.value = JsonEnd(pos) if body[pos] == "[" else None
            self.state = A_VALUE

    def _value_end(self, body: str, ready: int) -> int:
        """Where a non-object element ends (-1: not yet): a string, an array, a scalar."""
        at = self.elem
        if self.value is not None:
            return self.value.end(body, ready)
        if body[at] == '"':
            m = _STRING.match(body, at, ready)
            return -1 if m is None else m.end()
        m2 = _SCALAR_END.search(body, at, ready)
        return -1 if m2 is None else m2.start()

    def _drop(self, body: str, end: int, out: list[Event]) -> None:
        """The malformed piece from `elem` to `end` (its trailing blanks are markup). All
        pieces together are the text from the first one's start to the last one's end
        with the calls that stand cut out, each with the separator written before it: so
        every piece after the first takes what was written since the previous element."""
        obj = self.obj
        named = obj is not None and obj.named and not self.rejected
        self.obj = None
        start = self.elem
        e = start + len(body[start:end].rstrip())
        if e == start and not named:
            return
        out.append(Dropped(body[self.prev_end if self.dropped else start:e], named))
        self.dropped = True
        self.prev_end = e

    def close(self, body: str) -> list[Event] | None:
        """After the last `read` (of the whole body): what is still open is malformed, up
        to the array's closing `]`; None when no element stood (then all of it is text)."""
        out: list[Event] = []
        st = self.state
        if st not in (A_END, A_START, A_AFTER):
            end = len(body.rstrip())
            if st != A_TAIL and body[:end].endswith("]"):
                end = len(body[:end - 1].rstrip())
            self._drop(body, max(end, self.elem), out)
        return out if self.valid else None


_ARRAY_STEPS: tuple[Step[CallArray], ...] = (
    CallArray._start, CallArray._after, CallArray._end, CallArray._obj, CallArray._other,
    CallArray._bad)


# ------------------------------------------------------------------ mistral
_NAME_RUN = re.compile(r"\s*[\w.\-]*")
_V11_NAME = re.compile(r"\s*[\w.\-]+")
ARGS_MARK = "[ARGS]"


class MistralEnd(JsonValueEnd):
    """`[TOOL_CALLS]` then a JSON array/object, or (v11+ tokenizers) `name[ARGS]{json}`.

    There is no close marker: the call ends where its JSON value ends. A body that cannot
    be either form ends the call at the first character that rules it out (then the call
    is text, and that character is read again as text).
    """

    __slots__ = ()

    def _start(self, body: str) -> int:
        """Index of the JSON value; -1: undecided yet; <= -2: malformed at -(r + 2)."""
        head = body.lstrip()
        if not head:
            return -1
        if head[0] in "[{":
            return len(body) - len(head)
        e = _NAME_RUN.match(body).end()  # type: ignore[union-attr]
        if e == len(body):
            return -1
        if not body.startswith(ARGS_MARK, e):
            return -1 if ARGS_MARK.startswith(body[e:]) else -(e + 2)
        rest_at = e + len(ARGS_MARK)
        rest = body[rest_at:].lstrip()
        if not rest:
            return -1
        if rest[0] in "[{":
            return len(body) - len(rest)
        return -((len(body) - len(rest)) + 2)


_MISTRAL_V11 = re.compile(r"\s*([\w.\-]+)\[ARGS\](.*)", re.DOTALL)


def parse_mistral(body: str) -> Calls | None:
    try:
        m = _MISTRAL_V11.fullmatch(body)
        if m is not None:
            text = arguments_json(loads(m.group(2)))
            return None if text is None else [Call(m.group(1), text)]
        obj = loads(body)
    except ValueError:
        return None
    calls: Calls = []
    for item in obj if isinstance(obj, list) else [obj]:
        call = parse_name_arguments(item)
        if call is None:
            return None
        calls.append(call)
    return calls or None


# the states that start at a non-blank character first (`run_states`)
M_START, M_ARRAY, M_AFTER, M_ELEM, M_V11, M_DONE, M_BAD = range(7)


class MistralReader:
    """A JSON array of call objects (each call streams in turn; a finished element's
    closing brace leaves when the next one starts), one object, or `name[ARGS]{...}`."""

    piece_fast = True  # `fast` is `RawArgs.fast`: its own state and the piece

    __slots__ = ("args", "in_array", "objs", "pos", "state")

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.state = M_START
        self.pos = 0
        self.in_array = False
        self.objs: list[CallObject] = []
        self.args: RawArgs | None = None

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read`: the named call's `RawArgs.fast`, or None."""
        st = self.state
        if st == M_ELEM:
            return self.objs[-1].fast_now()
        args = self.args
        return args.fast if st == M_V11 and args is not None else None

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        self.pos = run_states(_MISTRAL_STEPS, self, body, self.pos, ready, out, M_ELEM, M_V11)
        return out

    # -- states (`run_states`): each returns where reading goes on, or `~` where it stops
    def _start(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """M_START: an array of calls, one call object, or `name[ARGS]`."""
        c = body[pos]
        if c == "[":
            self.in_array = True
            self.state = M_ARRAY
            return pos + 1
        if c == "{":
            self.objs.append(CallObject(pos))
            self.state = M_ELEM
            return pos
        at = body.find(ARGS_MARK, pos, ready)
        if at < 0:
            return ~pos
        if _V11_NAME.fullmatch(body, 0, at) is None:
            self.state = M_BAD
            return ~pos
        j = _WS.match(body, at + len(ARGS_MARK), ready).end()  # type: ignore[union-attr]
        if j >= ready:
            return ~pos
        if body[j] != "{":
            self.state = M_BAD
            return ~pos
        out.append(Opened(body[:at].strip()))
        self.args = RawArgs(j)
        self.state = M_V11
        return pos

    def _array(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """M_ARRAY: the next element's `{` (or an empty array's `]`)."""
        if body[pos] == "]" and not self.objs:
            self.state = M_DONE
            return ~pos
        if body[pos] != "{":
            self.state = M_BAD
            return ~pos
        self.objs.append(CallObject(pos))
        self.state = M_ELEM
        return pos

    def _after(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """M_AFTER an element of the array: `,` (the finished call's last brace leaves)
        or the array's `]`."""
        c = body[pos]
        if c == ",":
            out.append(self.objs[-1].rest(body))
            self.state = M_ARRAY
            return pos + 1
        if c == "]":
            self.state = M_DONE
            return ~(pos + 1)
        self.state = M_BAD
        return pos

    def _elem(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """M_ELEM: a call object, to its end."""
        obj = self.objs[-1]
        obj.read(body, ready, out)
        if obj.state == DONE:
            self.state = M_AFTER if self.in_array else M_DONE
            return obj.end
        if obj.state == BAD:
            self.state = M_BAD
        return ~pos

    def _v11(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """M_V11: `name[ARGS]`'s arguments object, to its end."""
        args = self.args
        assert args is not None
        frag = args.read(body, ready)
        if frag:
            out.append(frag)
        if args.end >= 0:
            self.state = M_DONE
        return ~pos

    def close(self, body: str) -> list[Event] | None:
        if self.state != M_DONE or parse_mistral(body) is None:
            return None
        if self.args is not None:
            return [self.args.rest(body)]
        if not self.objs or not all(o.named and o.state == DONE for o in self.objs):
            return None
        return [self.objs[-1].rest(body)]


_MISTRAL_STEPS: tuple[Step[MistralReader], ...] = (
    MistralReader._start, MistralReader._array, MistralReader._after, MistralReader._elem,
    MistralReader._v11)


# ------------------------------------------------------------------ deepseekv3 / v31
DS_SEP = "<｜tool▁sep｜>"
_DSV3 = re.compile(r"[^<\n]*" + DS_SEP + r"([^\n]+)\n```json\n(.*)\n```\s*", re.DOTALL)
_DSV31 = re.compile(r"([^<\n]+)" + DS_SEP + r"(.*)", re.DOTALL)
_PRE = re.compile(r"[^<\n]*")
_FENCE = "```json\n"
_V3_TAIL = re.compile(r"\n```\s*")


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
    return None if text is None or not name else [Call(name, text)]


class DeepSeekV3Reader(HeadFirst[RawArgs]):
    """`[function]<sep>name` then a ```json fence (V3) or the JSON itself (V3.1)."""

    piece_fast = True  # `fast` is `RawArgs.fast`: its own state and the piece

    __slots__ = ("name", "v3")

    def __init__(self, schemas: Schemas | None = None) -> None:
        super().__init__()
        self.name = ""
        self.v3 = False

    def _head(self, body: str, ready: int, out: list[Event]) -> RawArgs | None:
        sep = body.find(DS_SEP, 0, ready)
        if sep < 0:
            return None
        at = sep + len(DS_SEP)
        j = _WS.match(body, at, ready).end()  # type: ignore[union-attr]
        if j >= ready:
            return None
        if _PRE.fullmatch(body, 0, sep) is None:
            self.bad = True
            return None
        if body[j] == "{":  # V3.1: the name is before the separator
            name, start = body[:sep].strip(), j
        else:  # V3: the name line after it, then the fence
            nl = body.find("\n", at, ready)
            if nl < 0:
                return None
            fence_end = nl + 1 + len(_FENCE)
            if fence_end > ready:
                if not _FENCE.startswith(body[nl + 1:ready]):
                    self.bad = True
                return None
            if not body.startswith(_FENCE, nl + 1):
                self.bad = True
                return None
            name, start, self.v3 = body[at:nl].strip(), fence_end, True
        if not name:
            self.bad = True
            return None
        self.name = name
        out.append(Opened(name))
        return RawArgs(start)

    def _more(self, args: RawArgs, body: str, ready: int, out: list[Event]) -> None:
        frag = args.read(body, ready)
        if frag:
            out.append(frag)

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read`: `RawArgs.fast` once the arguments started."""
        return None if self.args is None or self.bad else self.args.fast

    def close(self, body: str) -> list[Event] | None:
        args = self.args
        tail = None if args is None else args.after(body)
        if args is None or tail is None:
            return None
        if (_V3_TAIL.fullmatch(tail) is None) if self.v3 else bool(tail.strip()):
            return None
        calls = parse_deepseekv3(body)
        first = calls[0] if calls else None
        if not isinstance(first, Call) or first.name != self.name:
            return None
        return [args.rest(body)]


# ------------------------------------------------------------------ the formats
def hermes() -> ToolFormat:
    return ToolFormat("hermes", "<tool_call>", lambda: CloseMarker("</tool_call>"),
                      parse_hermes, HermesReader, typed_whole=parse_hermes_typed)


def mistral() -> ToolFormat:
    return ToolFormat("mistral", "[TOOL_CALLS]", MistralEnd, parse_mistral, MistralReader,
                      inner=(ARGS_MARK,))


def deepseekv3() -> ToolFormat:
    return ToolFormat(
        "deepseekv3", "<｜tool▁call▁begin｜>", lambda: CloseMarker("<｜tool▁call▁end｜>"),
        parse_deepseekv3, DeepSeekV3Reader,
        ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"), (DS_SEP,),
        unwrapped=True)  # V3.1 may write a call without the section (SGLang's DeepSeekV31Detector)

