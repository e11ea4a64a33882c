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

from .schema import Schemas
from .tools import (
    Calls,
    CloseMarker,
    Dropped,
    Event,
    JsonEnd,
    RawArgs,
    ToolFormat,
    arguments_json,
    loads,
)

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

OPEN, KEY, VALUE, SKIP, ARGS, AFTER, DONE, BAD = range(8)


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
        pos = self.pos
        while self.state not in (DONE, BAD):
            st = self.state
            if st == ARGS:
                args = self.args
                assert args is not None
                frag = args.read(body, ready)
                if self.named:
                    if frag:
                        out.append((None, frag))
                elif frag:
                    self.unsent.append(frag)
                if args.end < 0:
                    break
                pos = args.end
                self.state = AFTER
                continue
            if st == SKIP:
                assert self.skip is not None
                e = self.skip.end(body, ready)
                if e < 0:
                    break
                pos = e
                self.state = AFTER
                continue
            pos = _WS.match(body, pos, ready).end()  # type: ignore[union-attr]
            if pos >= ready:
                break
            c = body[pos]
            if st == OPEN:
                if c != "{":
                    self.state = BAD
                    break
                pos += 1
                self.state = KEY
            elif st == KEY:
                if c == "}" and self.first:
                    pos += 1
                    self.end = pos
                    self.state = DONE
                    break
                m = _STRING.match(body, pos, ready) if c == '"' else None
                if m is None:
                    if c != '"':
                        self.state = BAD
                    break
                j = _WS.match(body, m.end(), ready).end()  # type: ignore[union-attr]
                if j >= ready:
                    break  # the colon has not arrived yet: read the key again then
                if body[j] != ":":
                    self.state = BAD
                    break
                try:
                    key = _string_value(m.group())
                except ValueError:
                    self.state = BAD
                    break
                k = "arguments" if key in ARG_KEYS else key
                if k in self.seen and k in ("name", "arguments"):
                    self.state = BAD
                    break
                self.seen.add(k)
                self.key = key
                self.first = False
                pos = j + 1
                self.state = VALUE
            elif st == VALUE:
                pos = self._value(body, pos, ready, c, out)
                if self.state == VALUE:
                    break
            else:  # AFTER
                if c == ",":
                    pos += 1
                    self.state = KEY
                elif c == "}":
                    self.end = pos + 1
                    pos += 1
                    self.state = DONE
                else:
                    self.state = BAD
        self.pos = pos

    def _value(self, body: str, pos: int, ready: int, c: str, out: list[Event]) -> int:
        key = self.key
        if key in ARG_KEYS:
            if c != "{":
                self.state = BAD  # arguments that are not an object are malformed
                return pos
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
                return pos  # wait for the string's end
            if key == "name":
                try:
                    name = _string_value(m.group())
                except ValueError:
                    name = None
                if not isinstance(name, str) or not name:
                    self.state = BAD
                    return pos
                self.named = True
                out.append((name, ""))
                if self.unsent:
                    out.append((None, "".join(self.unsent)))
                    self.unsent = []
            self.state = AFTER
            return m.end()
        if key == "name":
            self.state = BAD
            return pos
        m2 = _SCALAR_END.search(body, pos, ready)
        if m2 is None:
            return pos
        self.state = AFTER
        return m2.start()

    def rest(self, body: str) -> Event:
        """The call's last fragment (its object is done): the held brace, or `{}`."""
        if self.args is None:
            return (None, "{}")
        return (None, self.args.rest(body))


# ------------------------------------------------------------------ hermes / qwen25
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
    items: list[list[str] | Dropped] = []
    call: list[str] | None = None
    for event in events + rest:
        if isinstance(event, Dropped):
            if event.named and call is not None:
                items.pop()  # the call its name opened
            call = None
            items.append(Dropped(event.text))
            continue
        name, frag = event
        if name is not None:
            call = [name, ""]
            items.append(call)
        elif call is not None:
            call[1] += frag
    calls: Calls = []
    for item in items:
        if isinstance(item, Dropped):
            calls.append(item)
            continue
        text = arguments_json(loads(item[1]))
        assert text is not None  # the reader lets only a valid object stand
        calls.append((item[0], text))
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
        if obj is None or obj.state != ARGS or not obj.named:
            return None
        assert obj.args is not None
        return obj.args.fast

    def close(self, body: str) -> list[Event] | None:
        if self.array is not None:
            return self.array.close(body)
        obj = self.obj
        if obj is None or obj.state != DONE or not obj.named or body[obj.end:].strip() \
                or not valid_hermes(body):
            return None
        return [obj.rest(body)]


A_START, A_OBJ, A_VALUE, A_AFTER, A_END, A_BAD, A_TAIL = range(7)
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
        pos = self.pos
        while True:
            st = self.state
            if st == A_OBJ:
                obj = self.obj
                assert obj is not None
                if self.rejected:
                    obj.read(body, ready, [])
                else:
                    events: list[Event] = []
                    obj.read(body, ready, events)
                    for ev in events:
                        name = ev[0]  # type: ignore[index]
                        if name is not None and self.schemas is not None \
                                and name not in self.schemas:
                            self.rejected = True  # never sent: the element is text
                            break
                        out.append(ev)
                if obj.state == DONE:
                    pos = obj.end
                    text = body[self.elem:pos]
                    if obj.named and not self.rejected and valid_hermes(text):
                        out.append(obj.rest(body))
                        self.obj = None
                        self.valid += 1
                        self.prev_end = pos
                    else:
                        self._drop(body, pos, out)
                    self.state = A_AFTER
                    continue
                if obj.state == BAD:
                    pos = self.scan = obj.pos
                    self.state = A_BAD
                    continue
                break
            if st == A_VALUE:
                end = self._value_end(body, ready)
                if end < 0:
                    break
                pos = end
                self._drop(body, pos, out)
                self.state = A_AFTER
                continue
            if st == A_BAD:
                m = _NEXT_OBJECT.search(body, max(self.elem, self._back(body, self.scan)),
                                        ready)
                if m is None:
                    self.scan = max(self.scan, ready)
                    break
                self._drop(body, m.start(), out)
                pos = m.end() - 1
                self._element(body, pos)
                continue
            if st == A_TAIL:
                break
            pos = _WS.match(body, pos, ready).end()  # type: ignore[union-attr]
            if pos >= ready:
                break
            c = body[pos]
            if st == A_END:
                self.elem = pos  # text after the array: malformed, to the body's end
                self.state = A_TAIL
                break
            if st == A_AFTER:
                if c == ",":
                    pos += 1
                    self.state = A_START
                elif c == "]":
                    pos += 1
                    self.state = A_END
                else:
                    self.elem = self.scan = pos
                    self.state = A_BAD
                continue
            # A_START
            if c == "]" and self.elem < 0:
                pos += 1
                self.state = A_END  # `[]`: no call at all
            elif c in ",]":
                self.elem = self.scan = pos
                self.state = A_BAD
            else:
                self._element(body, pos)
        self.pos = pos

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


# ------------------------------------------------------------------ mistral
_NAME_RUN = re.compile(r"\s*[\w.\-]*")
_V11_NAME = re.compile(r"\s*[\w.\-]+")
ARGS_MARK = "[ARGS]"


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

    def skip(self, at: int, text: str) -> bool:
        """`JsonEnd.skip`, once the JSON value has started."""
        return self.json is not None and self.json.skip(at, text)

    def skip_now(self) -> Callable[[int, str], bool] | None:
        """`skip` until the next `end`: the JSON value's own, once it has started."""
        return None if self.json is None else self.json.skip

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
            return None if text is None else [(m.group(1), text)]
        obj = loads(body)
    except ValueError:
        return None
    items = obj if isinstance(obj, list) else [obj]
    calls = [parse_name_arguments(item) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return calls  # type: ignore[return-value]


M_START, M_ARRAY, M_ELEM, M_AFTER, M_V11, M_DONE, M_BAD = range(7)


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
            obj = self.objs[-1]
            if obj.state != ARGS or not obj.named:
                return None
            args = obj.args
        elif st == M_V11:
            args = self.args
        else:
            return None
        return None if args is None else args.fast

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        pos = self.pos
        while self.state not in (M_DONE, M_BAD):
            st = self.state
            if st == M_ELEM:
                obj = self.objs[-1]
                obj.read(body, ready, out)
                if obj.state == BAD:
                    self.state = M_BAD
                elif obj.state == DONE:
                    pos = obj.end
                    self.state = M_AFTER if self.in_array else M_DONE
                    continue
                break
            if st == M_V11:
                args = self.args
                assert args is not None
                frag = args.read(body, ready)
                if frag:
                    out.append((None, frag))
                if args.end >= 0:
                    self.state = M_DONE
                break
            pos = _WS.match(body, pos, ready).end()  # type: ignore[union-attr]
            if pos >= ready:
                break
            c = body[pos]
            if st == M_START:
                if c == "[":
                    pos += 1
                    self.in_array = True
                    self.state = M_ARRAY
                elif c == "{":
                    self.objs.append(CallObject(pos))
                    self.state = M_ELEM
                else:
                    at = body.find(ARGS_MARK, pos, ready)
                    if at < 0:
                        break
                    if _V11_NAME.fullmatch(body, 0, at) is None:
                        self.state = M_BAD
                        break
                    j = _WS.match(body, at + len(ARGS_MARK), ready).end()  # type: ignore[union-attr]
                    if j >= ready:
                        break
                    if body[j] != "{":
                        self.state = M_BAD
                        break
                    out.append((body[:at].strip(), ""))
                    self.args = RawArgs(j)
                    self.state = M_V11
            elif st == M_ARRAY:
                if c == "]" and not self.objs:
                    self.state = M_DONE
                    break
                if c != "{":
                    self.state = M_BAD
                    break
                self.objs.append(CallObject(pos))
                self.state = M_ELEM
                continue
            else:  # M_AFTER an element of the array
                if c == ",":
                    out.append(self.objs[-1].rest(body))  # the finished call's last brace
                    pos += 1
                    self.state = M_ARRAY
                    continue
                if c == "]":
                    pos += 1
                    self.state = M_DONE
                    break
                self.state = M_BAD
        self.pos = pos
        return out

    def close(self, body: str) -> list[Event] | None:
        if self.state != M_DONE or parse_mistral(body) is None:
            return None
        if self.args is not None:
            return [(None, self.args.rest(body))]
        if not self.objs or not all(o.named and o.state == DONE for o in self.objs):
            return None
        return [self.objs[-1].rest(body)]


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
    return None if text is None or not name else [(name, text)]


class DeepSeekV3Reader:
    """`[function]<sep>name` then a ```json fence (V3) or the JSON itself (V3.1)."""

    piece_fast = True  # `fast` is `RawArgs.fast`: its own state and the piece

    __slots__ = ("args", "bad", "name", "v3")

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.args: RawArgs | None = None
        self.name = ""
        self.v3 = False
        self.bad = False

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        if self.bad:
            return out
        if self.args is None:
            sep = body.find(DS_SEP, 0, ready)
            if sep < 0:
                return out
            at = sep + len(DS_SEP)
            j = _WS.match(body, at, ready).end()  # type: ignore[union-attr]
            if j >= ready:
                return out
            if _PRE.fullmatch(body, 0, sep) is None:
                self.bad = True
                return out
            if body[j] == "{":  # V3.1: the name is before the separator
                name, start = body[:sep].strip(), j
            else:  # V3: the name line after it, then the fence
                nl = body.find("\n", at, ready)
                if nl < 0:
                    return out
                fence_end = nl + 1 + len(_FENCE)
                if fence_end > ready:
                    if not _FENCE.startswith(body[nl + 1:ready]):
                        self.bad = True
                    return out
                if not body.startswith(_FENCE, nl + 1):
                    self.bad = True
                    return out
                name, start, self.v3 = body[at:nl].strip(), fence_end, True
            if not name:
                self.bad = True
                return out
            self.name = name
            self.args = RawArgs(start)
            out.append((name, ""))
        frag = self.args.read(body, ready)
        if frag:
            out.append((None, frag))
        return out

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read`: `RawArgs.fast` once the arguments started."""
        return None if self.args is None or self.bad else self.args.fast

    def close(self, body: str) -> list[Event] | None:
        args = self.args
        if args is None or args.end < 0:
            return None
        tail = body[args.end:]
        if (_V3_TAIL.fullmatch(tail) is None) if self.v3 else bool(tail.strip()):
            return None
        calls = parse_deepseekv3(body)
        first = calls[0] if calls else None
        if not isinstance(first, tuple) or first[0] != self.name:
            return None
        return [(None, args.rest(body))]


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

