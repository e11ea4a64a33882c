"""Tool-call parsing over the content channel: one engine, one small grammar per format.

How to add a format (why it is shaped this way):
  Write a module in this package that builds a `ToolFormat` and add one line to
  `formats.FORMATS`. A format says only what is specific to it: where a call opens
  (`call_open`, optionally inside a section wrapper), how its end is found (`CloseMarker`
  or an object with `end(body)`), and a per-call `CallReader` that turns the call's body,
  as it grows, into `Event`s: `(name, "")` when a call's name is known (`(name, id)` when
  the format writes a call id, which reaches the client as the first delta's `id`), then
  `(None, fragment)` for its arguments JSON. Everything that must be the same for every format
  lives in the engine and nowhere else: holding partial markers, call indices, rejecting
  names not in the request's `tools`, flags for malformed and cut calls, giving malformed
  calls back as text, and markup (wrappers, whitespace) around calls. So a new format
  cannot get those wrong, and the property tests of the engine cover it.
  A reader obeys three rules, which make stream == batch hold by construction:
  - decide only on `body[:ready]` (beyond it may be the start of the end marker);
  - emit only what no later text can change (a JSON reader holds its value's closing
    brace; a string value's possible trailing newline is held where the format strips it);
  - `close(body)` either returns the rest, so that everything emitted for the call
    concatenates to its final arguments (the same text a batch parse gives), or None
    when the call is malformed. Emitted text is never taken back; the engine flags it.
  `parse` is the format's whole-call parse for `tool_stream: "whole"` (one fragment
  when the call ends); a format without its own uses `parse_with_reader`.

Rules, identical for streaming and batch (batch is the same machine fed once, and every
decision depends only on the text so far, never on how it was chunked):
- Text outside calls is content. A partial marker at the end of a piece is held.
- `whole`: a call is released when it ends and parses, in one fragment. `incremental`
  (default): a call's first delta is its index and name with arguments "", then argument
  fragments as they become certain; the call's last fragment leaves when it ends.
- A call that ends but does not parse is delivered as text, byte for byte, with its
  markers; in incremental mode, if its name was already sent, the engine also sends a
  last delta for it with `malformed: true` (a batch merge drops such calls). A call still
  open at `finish` is text in whole mode, and in incremental mode (name sent) stands as
  sent, its last delta saying `cut: true`.
- With the request's `tools`, a call to a name not among them is not a call: it is text,
  like a malformed call (decided as soon as the name is known, so never sent as a call).
- A body that holds several calls (hermes' JSON array) reports a malformed element as a
  `Dropped` event: that element alone is text (and flagged, if its name was sent), given
  back when the body ends; the body is text as a whole only if no element stands.
- A section wrapper, and whitespace between calls, are held as "pending markup": dropped
  once a valid call follows, released as text if text or a malformed call follows, and at
  `finish` released only if it holds more than whitespace (an opened section with no valid
  call round-trips as text).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, Generic, Protocol, TypeVar

from .jsonio import dumps, loads
from .markers import MarkerSet
from .schema import Schemas
from .types import ParsedDelta, Thought, ToolCallDelta


class Dropped:
    """A malformed element of a call body that holds several calls (hermes' JSON array).

    Its siblings must not pay for it: the engine gives its text back as content and, when
    its name was already sent (`named`), flags that call malformed, while the well-formed
    elements stand. Only when no element stands is the whole body text, as for one call.
    """

    __slots__ = ("named", "text")

    def __init__(self, text: str, named: bool = False) -> None:
        self.text = text
        self.named = named


# (name, arguments) or (name, arguments, id): one call of a whole-call parse; a `Dropped`
# element where the body holds several calls and one is malformed
Call = tuple[str, str] | tuple[str, str, str]
Calls = list[Call | Dropped]
# (name, "" or its id) opens a call; (None, fragment) extends the call opened last
Event = tuple[str | None, str] | Dropped

# what a step releases, in output order: content, call deltas, reasoning (Harmony only)
Item = str | ToolCallDelta | Thought

TEXT, SECTION, CALL = 0, 1, 2
WHOLE, INCREMENTAL = "whole", "incremental"
TOOL_STREAMS = (INCREMENTAL, WHOLE)


def arguments_json(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    return dumps(obj)


def json_string(text: str) -> str:
    """`json.dumps(text, ensure_ascii=False)` (what it calls for a str), without `dumps`'
    per-call overhead (an encoder built per call)."""
    return encode_basestring(text)  # type: ignore[no-any-return]


def escape(text: str) -> str:
    """A piece of a JSON string's content: escaping is per character, so pieces concatenate
    to the escaping of the whole; the same bytes as `json.dumps(text, ensure_ascii=False)`
    (non-ASCII kept), by json's C encoder without `dumps`' per-call overhead."""
    return encode_basestring(text)[1:-1]


# ------------------------------------------------------------------ call ends
class CloseMarker:
    """The call ends at a fixed marker; the search resumes where the last one stopped.

    `settled`: only the marker can end the call from now on, so a piece that cannot
    complete the marker may skip `end` (`ToolParser.absorb`); a subclass with another
    way to end (DSML's self-closing head) is unsettled until that way is ruled out, and
    names in `head_stop` the character without which a piece can neither take that way
    nor rule it out (such a piece may skip `end` too: the next `end` decides as if it
    had seen it)."""

    __slots__ = ("close", "scan")
    settled = True
    head_stop = ""

    def __init__(self, close: str) -> None:
        self.close = close
        self.scan = 0

    def end(self, body: str) -> tuple[int, int]:
        at = body.find(self.close, self.scan)
        if at < 0:
            self.scan = max(0, len(body) - len(self.close) + 1)
            return -1, -1
        return at, at + len(self.close)


def ends_escaped(text: str, esc: bool) -> bool:
    """Whether a piece inside a string, with no quote in it that could end the string,
    ends with a backslash whose escaped character has not arrived (`esc`: the piece's first
    character is escaped). Only its trailing backslashes tell, in pairs: so a scanner
    takes such a piece (a file's `\\n` escapes: common) without its loop."""
    r = len(text) - len(text.rstrip("\\"))
    if esc and r == len(text):
        r -= 1
    return r % 2 == 1


_IN_STRING = re.compile(r'["\\]')
_STRUCTURE = re.compile(r'[\[\]{}"]')


class JsonEnd:
    """Where a JSON array/object that starts at `start` ends: brackets outside strings.

    Resumable: each call scans only what is new (up to `n`). Invalid JSON still gets an
    extent (its brackets balance somewhere, or the call stays open), and then fails to
    parse. `pos` is how far the scan has got: everything before it is inside the value.
    `esc`: the scan stopped right after a string's backslash, so the character at `pos`,
    when it arrives, is escaped (a tokenizer often cuts `\\n` between its two characters;
    held at the backslash instead, the scan sent the next piece `read`'s way).
    """

    __slots__ = ("depth", "esc", "in_string", "pos")

    def __init__(self, start: int) -> None:
        self.pos = start
        self.depth = 0
        self.in_string = False
        self.esc = False

    def end(self, body: str, n: int | None = None) -> int:
        i = self.pos
        if n is None:
            n = len(body)
        if self.esc:  # (inside a string) the character at `pos` is escaped
            if i >= n:
                return -1
            self.esc = False
            i += 1
        while True:
            if self.in_string:
                m = _IN_STRING.search(body, i, n)
                if m is None:
                    self.pos = max(i, n)
                    return -1
                j = m.start()
                if body[j] == "\\":
                    if j + 1 >= n:
                        self.pos = j + 1  # the escaped character has not arrived yet
                        self.esc = True
                        return -1
                    i = j + 2
                    continue
                self.in_string = False
                i = j + 1
                continue
            m = _STRUCTURE.search(body, i, n)
            if m is None:
                self.pos = max(i, n)
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

    def skip(self, at: int, text: str) -> bool:
        """`end` for a piece appended at `at`, when the scan has reached `at` and the value
        does not end in the piece: the scan moves past it, having read only the piece (not
        the body). False, state unchanged: not such a piece (`end` decides): the scan is
        behind `at`, or the value ends in it."""
        if self.pos != at:
            return False
        n = len(text)
        if not n:
            return True
        if self.in_string:
            if '"' not in text:  # all string: the common piece, or one with escapes
                self.pos = at + n
                # (without a backslash, an escaped first character is an ordinary one)
                self.esc = "\\" in text and ends_escaped(text, self.esc)
                return True
        elif _STRUCTURE.search(text) is None:
            self.pos = at + n
            return True
        # `end`'s loop over the piece alone, its state in locals until it is known to hold
        in_string, depth, i = self.in_string, self.depth, 1 if self.esc else 0
        esc = False
        while True:
            if in_string:
                m = _IN_STRING.search(text, i)
                if m is None:
                    break
                j = m.start()
                if text[j] == "\\":
                    if j + 1 >= n:
                        esc = True  # its escaped character comes with a later piece
                        break
                    i = j + 2
                    continue
                in_string = False
                i = j + 1
                continue
            m = _STRUCTURE.search(text, i)
            if m is None:
                break
            j = m.start()
            c = text[j]
            if c == '"':
                in_string = True
            elif c in "[{":
                depth += 1
            else:
                depth -= 1
                if depth <= 0:
                    return False
            i = j + 1
        self.in_string, self.depth, self.pos, self.esc = in_string, depth, at + n, esc
        return True


class RawArgs:
    """A JSON object written by the model, passed through as its arguments, unchanged.

    Released as far as it is scanned, except its closing brace, which leaves with the
    call's end (so a client never holds complete-looking arguments of a call that may
    still turn out malformed), and a string's backslash whose escaped character has not
    arrived (it leaves with that character, so an escape is never cut between fragments).
    Decides nothing about validity: the call's close does.
    """

    __slots__ = ("end", "json", "sent", "start")

    def __init__(self, start: int) -> None:
        self.start = self.sent = start
        self.json = JsonEnd(start)
        self.end = -1  # the value's end, once found

    def read(self, body: str, ready: int) -> str:
        if self.end < 0:
            e = self.json.end(body, ready)
            if e >= 0:
                self.end = e
        j = self.json
        limit = self.end - 1 if self.end >= 0 else min(j.pos - j.esc, ready)
        if limit <= self.sent:
            return ""
        frag = body[self.sent:limit]
        self.sent = limit
        return frag

    def rest(self, body: str) -> str:
        frag = body[self.sent:self.end]
        self.sent = self.end
        return frag

    def fast(self, at: int, text: str) -> str | None:
        """`read` for a piece appended at `at` (all of it ready), when everything before it
        was scanned and sent (but a held backslash, which leaves with it) and the value
        does not end in the piece (`JsonEnd.skip`): then all of it is inside the value and
        leaves as is, quotes and brackets included (but a backslash ending it, held).
        None: not such a piece (`read` decides)."""
        if self.end >= 0 or not text:
            return None
        j = self.json
        lead = ""
        if self.sent != at:
            if not (j.esc and self.sent == at - 1):
                return None
            lead = "\\"  # the held backslash: the piece brings its escaped character
        elif j.in_string and j.pos == at and '"' not in text and "\\" not in text:
            j.pos = self.sent = at + len(text)  # the common piece (`skip`'s first test)
            return text
        if not j.skip(at, text):
            return None
        if j.esc:  # the piece ends with a backslash: held for its escaped character
            self.sent = at + len(text) - 1
            return lead + text[:-1]
        self.sent = at + len(text)
        return lead + text if lead else text


_WS = re.compile(r"\s*")


class JsonValueEnd:
    """A call that is one JSON value and ends where the value ends (no end marker:
    llama3_json's object, mistral's array or object). `_start(body)` says where the value
    starts: its index, -1 while undecided, or `-2 - k` when the body cannot be such a call
    and ends (malformed) at k."""

    __slots__ = ("json",)

    def __init__(self) -> None:
        self.json: JsonEnd | None = None

    def end(self, body: str) -> tuple[int, int]:
        if self.json is None:
            start = self._start(body)
            if start < 0:
                return (-1, -1) if start == -1 else (-start - 2, -start - 2)
            self.json = JsonEnd(start)
        at = self.json.end(body)
        return at, at

    def _start(self, body: str) -> int:
        raise NotImplementedError

    def skip(self, at: int, text: str) -> bool:
        """`JsonEnd.skip`, once the JSON value has started."""
        return self.json is not None and self.json.skip(at, text)

    def skip_now(self) -> Callable[[int, str], bool] | None:
        """`skip` until the next `end`: the JSON value's own, once it has started."""
        return None if self.json is None else self.json.skip


class Stateful(Protocol):
    """A reader `run_states` drives: its `state` indexes its steps."""

    state: int


R = TypeVar("R", bound=Stateful)
# a reader's state's method: reads body[pos:ready] and returns where reading goes on, or
# `~` of where it stops until more of the body is ready
Step = Callable[[R, str, int, int, list[Event]], int]


def run_states(steps: tuple[Step[R], ...], reader: R, body: str, pos: int, ready: int,
               out: list[Event], blank_first: int, last: int) -> int:
    """A reader's state machine, one method per state (`steps`, by state): runs it from
    `pos` and returns where reading stopped. A state below `blank_first` starts at the
    next non-blank character (reading stops at `ready` while there is none); a state
    above `last` reads nothing more. One loop for every reader written this way, so each
    state's method holds only its own rule."""
    while True:
        st = reader.state
        if st > last:
            return pos
        if st < blank_first:
            pos = _WS.match(body, pos, ready).end()  # type: ignore[union-attr]
            if pos >= ready:
                return pos
        pos = steps[st](reader, body, pos, ready, out)
        if pos < 0:
            return ~pos


A = TypeVar("A")


class HeadFirst(Generic[A]):
    """A call reader whose call's head (its name, and id) is complete before the
    arguments start (DeepSeek V3's, Kimi's): nothing leaves before the head does, and a
    head that is not the format's makes the call malformed (`bad`: nothing more is read,
    `close` gives None). `_head` reads the head (None: not yet, or `bad`), `_more` the
    arguments it started."""

    __slots__ = ("args", "bad")

    def __init__(self) -> None:
        self.args: A | None = None
        self.bad = False

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        if self.bad:
            return out
        args = self.args
        if args is None:
            args = self.args = self._head(body, ready, out)
            if args is None:
                return out
        self._more(args, body, ready, out)
        return out

    def _head(self, body: str, ready: int, out: list[Event]) -> A | None:
        raise NotImplementedError

    def _more(self, args: A, body: str, ready: int, out: list[Event]) -> None:
        raise NotImplementedError


class ObjectArgs:
    """A call whose arguments are one JSON object from `after` on (whitespace around it;
    only whitespace: `{}`), passed through as written (`RawArgs`). `read`/`close` give the
    argument events of a `CallReader` whose name is already known (kimi_k2, gpt-oss)."""

    __slots__ = ("after", "args", "bad")

    def __init__(self, after: int) -> None:
        self.after = after
        self.args: RawArgs | None = None
        self.bad = False

    def read(self, body: str, ready: int, out: list[Event]) -> None:
        if self.bad:
            return
        if self.args is None:
            j = _WS.match(body, self.after, ready).end()  # type: ignore[union-attr]
            if j >= ready:
                return
            if body[j] != "{":
                self.bad = True
                return
            self.args = RawArgs(j)
        frag = self.args.read(body, ready)
        if frag:
            out.append((None, frag))

    def close(self, body: str) -> list[Event] | None:
        args = self.args
        if self.bad:
            return None
        if args is None:
            return None if body[self.after:].strip() else [(None, "{}")]
        if args.end < 0 or body[args.end:].strip():
            return None
        try:
            if not isinstance(loads(body[args.start:args.end]), dict):
                return None
        except ValueError:
            return None
        return [(None, args.rest(body))]


def object_arguments(text: str) -> str | None:
    """Whole mode for `ObjectArgs`: the object re-serialised, `{}` for blank, or None."""
    if not text.strip():
        return "{}"
    try:
        return arguments_json(loads(text))
    except ValueError:
        return None


# ------------------------------------------------------------------ formats
class CallReader(Protocol):
    """Per call, incremental mode: the call's body as it grows -> name and argument events.

    `read` is called with the body so far and `ready`, the length of the part that cannot
    be the start of the end marker; it returns the events that part makes certain.
    `close` is called once with the complete body (after a last `read` of all of it): the
    remaining events, or None when the call is malformed.

    Optional, for speed: the hooks `FastPath` collects (its docstring says what each
    must give), so that the common piece inside a call skips the engine's scans.
    """

    def read(self, body: str, ready: int) -> list[Event]: ...

    def close(self, body: str) -> list[Event] | None: ...


class FastPath:
    """An open call's shortcuts for a piece appended to its body, collected once per call
    from its reader and its end, so the engine asks one object and a reader or an end
    without them gets the defaults, which decline every piece (the engine's full way).

    From the reader (incremental mode):
    - `fast(at, text) -> str | None`: for a piece `text` appended at `at` that holds no
      character starting the call's end marker, the argument fragment `read` would give
      for it, without the scan (None: not in a state that can tell).
    - `piece_fast = True`: its `fast` depends only on its own state and the piece, never
      on what the body holds before `at`; it is then also given a piece that holds the
      marker's first character where no marker can start (code's `<`), all of it ready.
    - `waits(text) -> bool`: True when `read` would give nothing for the piece and change
      nothing, however much of it is ready (a head waiting for its `>`): a piece that may
      hold the start of the end marker then only grows the body.
    From an end without a close marker (a JSON value's, a Python list's):
    - `skip(at, text) -> bool`: True when the piece cannot end the call (its state moved
      past it as `end` would), so the piece skips the engine's end search.
    A reader's `fast_now()` (an end's `skip_now()`) gives the `fast` (`skip`) to use until
    its next `read` (`end`), None for none: the object that `fast` would delegate to, so a
    piece costs one Python call less. The engine asks again after each.
    """

    __slots__ = ("fast", "fast_now", "piece", "skip", "skip_now", "waits")

    def __init__(self, reader: object = None, ender: object = None) -> None:
        self.fast_now: Callable[[], Callable[[int, str], str | None] | None] | None = \
            getattr(reader, "fast_now", None)
        self.fast: Callable[[int, str], str | None] | None = \
            self.fast_now() if self.fast_now is not None else getattr(reader, "fast", None)
        self.piece: bool = getattr(reader, "piece_fast", False)
        self.waits: Callable[[str], bool] | None = getattr(reader, "waits", None)
        self.skip_now: Callable[[], Callable[[int, str], bool] | None] | None = \
            getattr(ender, "skip_now", None)
        self.skip: Callable[[int, str], bool] | None = \
            self.skip_now() if self.skip_now is not None else getattr(ender, "skip", None)


NO_FAST_PATH = FastPath()


ReaderFactory = Callable[[Schemas | None], CallReader]


def parse_with_reader(make_reader: ReaderFactory) -> Callable[[str, Schemas | None],
                                                               Calls | None]:
    """A whole-call parse from a reader: the same grammar, the same bytes, in one piece."""
    def parse(body: str, schemas: Schemas | None) -> Calls | None:
        reader = make_reader(schemas)
        events = reader.read(body, len(body))
        rest = reader.close(body)
        if rest is None:
            return None
        calls: list[list[str]] = []
        for event in events + rest:
            if isinstance(event, Dropped):  # (no reader run this way emits these)
                return None
            name, frag = event
            if name is not None:
                calls.append([name, "", frag])
            elif calls:
                calls[-1][1] += frag
        return [(n, a, i) if i else (n, a) for n, a, i in calls] or None  # type: ignore[misc]
    return parse


class ToolFormat:
    """A grammar, shared by every request using it (immutable after construction).

    `parse(body)` is the whole-mode parse (`tool_stream: "whole"`);
    `reader(schemas)` makes the per-call incremental reader. A schema-typed format passes
    `typed_parse` instead of `parse`: its whole mode is its reader run once.

    Options, for what models really write rather than what their templates say:
    - `unwrapped`: `call_open` outside any section opens a call too, because models drop
      the section wrapper (DeepSeek V3.1 and DSML calls, Llama 4's `[f()]` without
      `<|python_start|>`). Such a call returns to text, not to a section; the section's
      closer right after it (only whitespace between) is the dropped wrapper's other half,
      so it is markup.
    - `unmarked`: what a call's body starts with when it opens with no marker at all,
      because some formats have no opener the model reliably writes (llama3_json's `{`):
      at the start of the output (after whitespace), and after a call when `chain` (a
      separator, whitespace around it: llama3_json's `;`) follows it. The markup that
      opens it (whitespace, separator) is pending markup, as a wrapper is. Anywhere else
      the same text is content, so prose with JSON in it stays prose.
    - `loose`: prefixes of a damaged section wrapper (opener, closer), because models
      misspell wrappers: an opener prefix that is no known marker starts a section; the
      rest of a section opener's line is markup (dropped if a call follows, text
      otherwise); a closer prefix after a call closes it up to its `>` or its line's end.
    - `quotes`: markers inside a Markdown code fence or an inline code span are text,
      because a model explaining its own format quotes the markup.
    - `parser`: the per-request class, for a format with its own framing that cannot be
      one content channel with calls in it (Harmony's messages subclass ToolParser).
    - `typed_whole`: a whole-mode parse that takes the request's tools, for a body that
      holds several calls where a name not in `tools` costs only its own element.
    """

    def __init__(self, name: str, call_open: str, end: Callable[[], Any],
                 parse: Callable[[str], Calls | None] | None, reader: ReaderFactory,
                 section: tuple[str, str] | None = None, inner: tuple[str, ...] = (),
                 unwrapped: bool = False, unmarked: str = "", chain: str = "",
                 loose: tuple[str, str] | None = None, quotes: bool = False,
                 parser: type[ToolParser] | None = None,
                 typed_whole: Callable[[str, Schemas | None], Calls | None] | None = None
                 ) -> None:
        self.name = name
        self.section = section
        self.call_open = call_open
        self.unmarked = unmarked
        self.chain = chain if unmarked else ""
        self.parser = parser or ToolParser
        self.make_end = end
        self.reader = reader
        whole = parse_with_reader(reader)
        self.parse: Callable[[str, Schemas | None], Calls | None] = \
            whole if parse is None else (lambda body, _schemas: parse(body))
        if typed_whole is not None:  # a whole parse that needs the request's tools itself
            self.parse = typed_whole
        # without a section every call is unwrapped already
        self.unwrapped = unwrapped and section is not None
        self.loose = loose if section is not None else None
        self.quotes = quotes
        self._marker_sets(end())
        # every marker string (special tokens inside them must reach the parser)
        close = [self.close_marker] if self.close_marker else []
        self.markers = tuple(dict.fromkeys([*(section or ()), call_open, *close, *inner]))

    def _marker_sets(self, closer: Any) -> None:
        """The markers each engine state searches for, from the options (`__init__`)."""
        section, call_open, loose = self.section, self.call_open, self.loose
        openers = [section[0] if section else call_open]
        if self.unwrapped:
            openers.append(call_open)
        if loose is not None:
            openers.append(loose[0])
        # closers a TEXT state drops right after a call (the section of unwrapped calls)
        self.text_closers = ((section[1],) if self.unwrapped and section else ()) + \
            ((loose[1],) if loose else ())
        self.opener = MarkerSet(openers + list(self.text_closers))
        # a call's body can skip the engine on pieces without this character
        self.close_first = closer.close[0] if isinstance(closer, CloseMarker) else None
        self.close_marker = closer.close if isinstance(closer, CloseMarker) else ""
        self.close_reach = max(0, len(self.close_marker) - 1)
        self.close_set = MarkerSet([self.close_marker]) if self.close_marker else None
        self.in_section = MarkerSet([call_open, section[1]] + ([loose[1]] if loose
                                                               else [])) if section else None
        # marker prefixes a TEXT (SECTION) state holds whole, with nothing to release: a
        # piece that keeps the held text one of them only grows it (`ToolParser.absorb`).
        # A prefix holding a marker the state acts on at once is not among them.
        self.text_holds = _holds(self.opener, (*(loose or ()), *self.text_closers))
        self.section_holds = frozenset() if self.in_section is None else \
            _holds(self.in_section, loose[1:] if loose else ())


def _holds(markers: MarkerSet, waiting: tuple[str, ...]) -> frozenset[str]:
    """The proper prefixes of `markers` in which the earliest marker found, if any, is at
    the start and one of `waiting` (a marker that waits while it may grow into a longer
    one): `_text`/`_section` hold such a text whole and release nothing."""
    out = set()
    for p in markers.prefixes:
        at, m = markers.find(p)
        if at < 0 or (at == 0 and m in waiting):
            out.add(p)
    return frozenset(out)


_QUOTE_CH = re.compile(r"[`~\n]")


class Quotes:
    """Whether the text so far ends inside Markdown code: a fence (a line starting, after at
    most 3 spaces, with 3+ backticks or tildes, closed by a line starting with at least as
    many of the same) or an inline span (a backtick run, closed by a run of the same length
    on the same line; a span left open ends with its line). Fed the text outside calls."""

    __slots__ = ("fence_c", "fence_n", "inline", "lead", "line", "run_c", "run_line", "run_n")

    def __init__(self) -> None:
        self.fence_c = ""
        self.fence_n = 0
        self.inline = 0
        self.line = True  # at a line's start (only spaces, at most 3, since it began)
        self.lead = 0
        self.run_c = ""
        self.run_n = 0
        self.run_line = False

    def feed(self, t: str) -> None:
        # (mid-line, no run under way, and no newline, backtick or tilde in t: nothing
        # changes; the shard's hot path, request.py, skips the call then)
        if not self.run_n and "`" not in t and "~" not in t:
            # no run under way and none in the piece: only where lines start can change (a
            # newline closes an open inline span and starts a line; what follows the last
            # one, as the loop's gap rule reads it); the common case
            nl = t.rfind("\n")
            if nl >= 0:
                self.inline = 0
                self.line, self.lead = True, 0
                t = t[nl + 1:]
            if self.line and t:
                if t.strip(" ") or self.lead + len(t) > 3:
                    self.line = False
                else:
                    self.lead += len(t)
            return
        i, n = 0, len(t)
        while i < n:
            m = _QUOTE_CH.search(t, i)
            j = n if m is None else m.start()
            if j > i:
                if self.run_n:
                    self._end_run()
                if self.line:
                    gap = t[i:j]
                    if gap.strip(" ") or self.lead + len(gap) > 3:
                        self.line = False
                    else:
                        self.lead += len(gap)
                if m is None:
                    return
            c = t[j]
            if c == "\n":
                if self.run_n:
                    self._end_run()
                self.inline = 0
                self.line, self.lead = True, 0
            elif self.run_n and c == self.run_c:
                self.run_n += 1
            else:
                if self.run_n:
                    self._end_run()
                self.run_c, self.run_n, self.run_line = c, 1, self.line
                self.line = False
            i = j + 1

    def _end_run(self) -> None:
        c, n, at_line = self.run_c, self.run_n, self.run_line
        self.run_n = 0
        if self.fence_n:
            if at_line and c == self.fence_c and n >= self.fence_n:
                self.fence_n = 0
        elif self.inline:
            if c == "`" and n == self.inline:
                self.inline = 0
        elif at_line and n >= 3:
            self.fence_c, self.fence_n = c, n
        elif c == "`":
            self.inline = n

    @property
    def quoted(self) -> bool:
        if self.run_n:
            self._end_run()
        return bool(self.fence_n or self.inline)

    def markup(self) -> None:
        """Markup (a section or call) was taken out: the next text is mid-line."""
        if self.run_n:
            self._end_run()
        self.line = False


class ToolParser:
    """Per-request state of one format; `feed` per content piece, `finish` once."""

    __slots__ = (
        "after_call",
        "body",
        "count",
        "delivered",
        "dropped",
        "ender",
        "fresh_start",
        "fmt",
        "held",
        "home",
        "incremental",
        "loose_line",
        "markup_ok",
        "opened",
        "opened_by",
        "out",
        "path",
        "pending",
        "quotes",
        "reader",
        "rejected",
        "schemas",
        "section_ok",
        "state",
    )

    def __init__(self, fmt: ToolFormat, tool_stream: str = INCREMENTAL,
                 schemas: Schemas | None = None) -> None:
        self.fmt = fmt
        self.incremental = tool_stream == INCREMENTAL
        self.schemas = schemas
        self.state = TEXT
        self.held = ""  # a possible marker prefix (TEXT / SECTION)
        self.pending = ""  # markup that a valid call drops and anything else releases
        self.body = ""  # the open call's text after its opener
        self.ender: Any = None
        self.reader: CallReader | None = None  # incremental: the open call's reader
        # the open call's shortcuts (its reader's and its end's), or none
        self.path = NO_FAST_PATH
        self.opened: list[int] = []  # incremental: indices of the open body's sent calls
        self.dropped = ""  # incremental: text of the open body's malformed elements
        self.rejected = False  # incremental: the open body is already known to be text
        self.section_ok = False  # a valid call was released in the current section
        self.after_call = False  # a valid call was released: whitespace may be markup
        self.loose_line = False  # in a damaged wrapper's line: all of it is markup
        self.markup_ok = False  # only whitespace since a valid call (a closer is markup)
        self.quotes = Quotes() if fmt.quotes else None
        self.opened_by = ""  # the marker that opened the open call ("" for an unmarked one)
        self.home = TEXT  # the state the open call returns to: TEXT when it is unwrapped
        self.fresh_start = bool(fmt.unmarked)  # `unmarked`: only whitespace seen so far
        self.count = 0  # indices given out (a malformed call's index is not reused)
        self.delivered = 0  # calls that stand (valid, or cut by the end of the output)
        # str (content) and ToolCallDelta items in output order, fresh per step
        self.out: list[Item] = []

    @property
    def markers(self) -> tuple[str, ...]:
        return self.fmt.markers

    def absorb(self, text: str) -> str | list[Item] | None:
        """Inside a call, a piece that cannot start or finish its close marker only grows it,
        so it needs none of `step`'s search for the call's end: None if it must go through
        `step`; else what it adds to the open call's arguments ("" in whole mode, where
        nothing of a call leaves before its end), or, when the reader's events are more than
        one fragment (the call's name, a malformed element), the items they make.

        Outside a call, with a marker prefix held, a piece that only grows it (the held
        text and the piece are still a prefix that `step` would hold whole) is absorbed
        too: ""; and in TEXT state before any call, one after which the held text and the
        piece are plain text (no marker, nothing to hold: `<think>` in content) releases
        them: [that text], and the parser is idle again."""
        if self.state != CALL:
            return self._absorb_held(text)
        body = self.body
        path = self.path
        close = self.fmt.close_first
        if close is None:  # an end with no marker: its own `skip` tells
            skip = path.skip
            if skip is None or not skip(len(body), text):
                return None
        else:
            ender = self.ender
            if not ender.settled and ender.head_stop in text:
                return None
            lo = max(0, len(body) - self.fmt.close_reach)  # (a negative start counts from the end)
            if close in text or body.find(close, lo) >= 0:
                del body  # `_absorb_near` must hold the body's only reference
                return self._absorb_near(text, lo)
        # the common piece, all of it ready: `_grow`, its `fast` route inlined (once per
        # piece inside a call). `fast` is None in whole mode.
        fast = path.fast
        if fast is not None and self.opened and not self.rejected:
            frag = fast(len(body), text)
            if frag is not None:
                self.body = ""
                body += text  # the only reference: CPython grows it in place
                self.body = body
                return frag
            del body
            return self._read(text, -1)
        del body  # `_grow` must hold the body's only reference, to grow it in place
        return self._grow(text)

    def _absorb_held(self, text: str) -> str | list[Item] | None:
        """`absorb` outside a call (its docstring's second part)."""
        held = self.held
        if not held or self.fresh_start or self.loose_line:
            return None
        s = held + text
        fmt = self.fmt
        if self.state == TEXT:
            if s in fmt.text_holds and not (self.markup_ok and fmt.chain):
                self.held = s
                return ""
            # `_text` on s: no marker and no hold, outside markup context (no call yet)
            if not self.after_call and self.plain_text(s):
                self.held = ""
                if self.quotes is not None:
                    self.quotes.feed(s)
                self.markup_ok = False
                return [s]
        elif s in fmt.section_holds:
            self.held = s
            return ""
        return None

    def _absorb_near(self, text: str, lo: int) -> str | list[Item] | None:
        """`absorb` for a piece with the close marker's first character in it, or in the
        body's last `close_reach` characters (from `lo`): the piece ends the call if the
        marker is complete in them (None: `step` ends it); else it grows the body, whose
        part that could still start the marker is not ready (as `_call` holds it)."""
        fmt = self.fmt
        window = self.body[lo:] + text
        if fmt.close_marker in window:
            return None
        path = self.path
        waits = path.waits
        if waits is not None and waits(text):  # nothing to read: only grow
            del window
            body = self.body
            self.body = ""
            body += text  # the only reference: CPython grows it in place
            self.body = body
            return ""
        ready = lo + fmt.close_set.hold_from(window)  # type: ignore[union-attr]
        if ready < lo + len(window) or not path.piece:
            return self._grow(text, ready)
        # all of it ready (a `<` in code that starts no marker), and the reader's `fast`
        # reads the piece alone: `_grow`'s common route
        return self._grow(text)

    def _grow(self, text: str, ready: int = -1) -> str | list[Item]:
        """`absorb`'s rest, once the piece is known not to end the call: the body grows
        by it, and the reader reads it up to `ready` (-1: all of it, no marker can start;
        only then may the reader's `fast` take the piece)."""
        if self.incremental and not self.rejected:
            fast = self.path.fast
            if fast is not None and self.opened and ready < 0:
                frag = fast(len(self.body), text)
                if frag is not None:
                    body = self.body
                    self.body = ""
                    body += text
                    self.body = body
                    return frag
            return self._read(text, ready)
        body = self.body
        self.body = ""
        body += text  # the only reference: CPython grows it in place
        self.body = body
        return ""

    def _read(self, text: str, ready: int) -> str | list[Item]:
        """The body grows by the piece and the reader reads it up to `ready` (-1: all):
        its events as one fragment, or the items they make."""
        body = self.body
        self.body = ""
        body += text  # the only reference: CPython grows it in place
        self.body = body
        events = self.reader.read(body, len(body) if ready < 0 else ready)  # type: ignore[union-attr]
        path = self.path
        if path.fast_now is not None:
            path.fast = path.fast_now()
        if not events:
            return ""
        ev = events[0]
        if ev.__class__ is tuple and ev[0] is None and self.opened:  # type: ignore[index]
            if len(events) == 1:
                return ev[1]  # type: ignore[index]
            # several fragments of the open call (a key and its value's start): one
            if all(e.__class__ is tuple and e[0] is None for e in events):  # type: ignore[index]
                return "".join([e[1] for e in events])  # type: ignore[index]
        out = self.out = []
        self._events(events)
        return out

    def plain_text(self, text: str) -> bool:
        """An idle parser's piece with a marker's first character but no marker and no
        marker prefix at its end: all content, as `step` would find, without its
        machinery (code and `<think>` tags in content are common)."""
        opener = self.fmt.opener
        return opener.find(text)[0] < 0 and opener.hold_from(text) == len(text)

    @property
    def in_call(self) -> bool:
        """Inside a call's body: a piece may be `absorb`ed."""
        return self.state == CALL

    @property
    def idle(self) -> bool:
        """Nothing held and no markup context: a piece with no marker start may skip the
        engine. After a call (`after_call`), whitespace ending a piece is held as pending
        markup, so there only a piece that does not end with whitespace may skip it (the
        caller's test); without that, every content row after a call paid for `step`."""
        return (self.state == TEXT and not self.held and not self.pending
                and not self.markup_ok and not self.fresh_start)

    def step(self, text: str) -> list[Item]:
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

    def flush(self) -> list[Item]:
        """End of output: held prefixes and non-blank markup become text; an open call is
        text, or (incremental, already sent) stands as sent and is flagged cut."""
        out = self.out = []
        tail = self.pending if self.pending.strip() else ""
        if self.state == CALL:
            if self._cut(out):
                tail = self.dropped  # the calls stand: only malformed elements are text
            else:
                tail = self.pending + self.opened_by + self.body
        tail += self.held
        if tail:
            out.append(tail)
        self.held = self.pending = self.body = self.dropped = ""
        self.opened = []
        self.reader = None
        self.state = TEXT
        self.loose_line = self.markup_ok = False
        return out

    def _cut(self, out: list[Item]) -> bool:
        """The output ended inside a call: when its name was sent (and not rejected), its
        calls stand as sent, each flagged cut; False: the call is text."""
        if not self.opened or self.rejected:
            return False
        for i in self.opened:
            out.append(ToolCallDelta(i, cut=True))
        self.delivered += len(self.opened)
        return True

    # -- states: each consumes a prefix of s and returns the rest
    def _text(self, s: str) -> str:
        fmt = self.fmt
        # `chain` only right after a call (whitespace between): once text has come since,
        # a separator is text, whatever the rows (a batch parse sees the text before it)
        if self.fresh_start or (self.markup_ok and fmt.chain):
            rest = self._unmarked(s)
            if rest is not None:
                return rest
        opener = fmt.opener
        at, m = opener.find(s)
        if at >= 0 and (fmt.loose is not None and m in fmt.loose or m in fmt.text_closers):
            # a prefix marker that may still grow into a longer one, or a closer still
            # looking for its end: decided by later text
            end = self._closer_end(s, at, m) if m in fmt.text_closers else at + len(m)
            if end < 0 or _grows(opener.markers, s, at, m):
                self._stray_text(s[:at])
                self.held = s[at:]
                return ""
        if at < 0:
            keep = opener.hold_from(s)
            self.held = s[keep:]
            self._stray_text(s[:keep])
            return ""
        quotes = self.quotes
        if quotes is not None:
            quotes.feed(s[:at])
            if quotes.quoted:  # quoted markup is text, never a call
                quotes.feed(m)
                self._stray(s[:at + len(m)], self.after_call)
                return s[at + len(m):]
        self._stray(s[:at], self.after_call)
        return self._text_marker(s, at, m)

    def _text_marker(self, s: str, at: int, m: str) -> str:
        """`_text` at the marker m found at `at` (the text before it taken): a closer
        after an unwrapped call, a call's opener, or a section's."""
        fmt = self.fmt
        quotes = self.quotes
        if m in fmt.text_closers:
            end = self._closer_end(s, at, m)
            if self.markup_ok:  # the end of an unwrapped call's (damaged) section: markup
                self.pending = ""
                if quotes is not None:
                    quotes.markup()
            else:
                self._stray_text(s[at:end])
            return s[end:]
        if quotes is not None:
            quotes.markup()
        if m == fmt.call_open:  # a call without its section (`unwrapped`), or no section
            self._open_call(m)
        else:
            self.state = SECTION
            self.pending += m
            self.section_ok = False
            # a tolerant format: the rest of the wrapper's line is markup too (stray words)
            self.loose_line = fmt.loose is not None
        return s[at + len(m):]

    def _stray_text(self, t: str) -> None:
        if t and self.quotes is not None:
            self.quotes.feed(t)
        self._stray(t, self.after_call)

    def _closer_end(self, s: str, at: int, m: str) -> int:
        """Where a section closer found at `at` ends: a damaged one at its `>` or its line's
        end; -1 while neither has arrived."""
        fmt = self.fmt
        if fmt.section is not None and m == fmt.section[1]:
            return at + len(m)
        gt = s.find(">", at + len(m))
        nl = s.find("\n", at + len(m))
        if gt >= 0 and (nl < 0 or gt < nl):
            return gt + 1
        return nl

    def _unmarked(self, s: str) -> str | None:
        """A call with no opener (`fmt.unmarked`) at the output's start or after `chain`:
        returns the rest of s from the call's body on, "" when undecided (the tail is
        held), None when this is not such a call (s goes the usual way)."""
        start, chain = self.fmt.unmarked, self.fmt.chain
        t = s.lstrip()
        if self.fresh_start:
            if not t:
                self.held = s  # only whitespace so far: undecided
                return ""
            self.fresh_start = False
            if not t.startswith(start):
                return None
            self.pending += s[:len(s) - len(t)]
            self._open_call("")
            return t
        if not t.startswith(chain):
            return None  # (whitespace alone after a call is pending markup, as usual)
        u = t[len(chain):].lstrip()
        if not u:  # a separator, and maybe whitespace: undecided
            self.pending += s[:len(s) - len(t)]
            self.held = t
            return ""
        if not u.startswith(start):
            return None
        self.pending += s[:len(s) - len(u)]
        self._open_call("")
        return u

    def _section(self, s: str) -> str:
        markers = self.fmt.in_section
        assert markers is not None and self.fmt.section is not None
        at, m = markers.find(s)
        if self.loose_line:  # the rest of a damaged wrapper's line is markup
            nl = s.find("\n")
            if nl >= 0 and (at < 0 or nl < at):
                self.pending += s[:nl + 1]
                self.loose_line = False
                return s[nl + 1:]
            if at < 0:
                keep = markers.hold_from(s)
                self.pending += s[:keep]
                self.held = s[keep:]
                return ""
            self.pending += s[:at]
            self.loose_line = False
            s = s[at:]
            at = 0
        loose = self.fmt.loose
        end = at + len(m)
        if at >= 0 and loose is not None and m == loose[1]:
            end = self._closer_end(s, at, m)
            if end < 0 or _grows(markers.markers, s, at, m):
                self._stray(s[:at], True)
                self.held = s[at:]
                return ""
        if at < 0:
            keep = markers.hold_from(s)
            self.held = s[keep:]
            self._stray(s[:keep], True)
            return ""
        self._stray(s[:at], True)
        if m == self.fmt.call_open:
            self._open_call(m)
        else:
            if not self.section_ok:
                self.out.append(self.pending + s[at:end])
            self.pending = ""
            self.state = TEXT
            self.markup_ok = False
        return s[end:]

    def _open_call(self, marker: str) -> None:
        self.opened_by = marker
        self.home = self.state
        self.state = CALL
        self.body = ""
        self.ender = self.fmt.make_end()
        if self.incremental:
            self.reader = self.fmt.reader(self.schemas)
            self.opened = []
            self.dropped = ""
            self.rejected = False
        # an end with a close marker has no `skip`: the engine's search is short
        self.path = FastPath(self.reader if self.incremental else None,
                             self.ender if self.fmt.close_first is None else None)

    def _call(self, s: str) -> str:
        body, self.body = self.body, ""
        body += s  # the only reference: CPython grows it in place, no copy per piece
        end_body, end_call = self.ender.end(body)
        if end_body < 0:
            self.body = body
            path = self.path
            if path.skip_now is not None:
                path.skip = path.skip_now()
            if self.incremental and not self.rejected:
                cs = self.fmt.close_set
                ready = len(body) if cs is None else cs.hold_from(body)
                self._events(self.reader.read(body, ready))  # type: ignore[union-attr]
                if path.fast_now is not None:
                    path.fast = path.fast_now()
            return ""
        self.ender = None
        self.state = self.home
        inner = body[:end_body]
        if self.incremental:
            ok = self._close(inner)
        else:
            try:
                calls = self.fmt.parse(inner, self.schemas)
            except RecursionError:  # JSON nested beyond the interpreter's depth: malformed
                calls = None
            good = [] if calls is None else \
                [c for c in calls if not isinstance(c, Dropped)]
            if self.schemas is not None and any(c[0] not in self.schemas for c in good):
                good = []  # a name not in the request's tools: text, as malformed
            ok = bool(good)
            if ok:
                for call in good:
                    self.out.append(ToolCallDelta(self.count, call[0], call[1],
                                                  id=call[2] if len(call) > 2 else None))
                    self.count += 1
                self.delivered += len(good)
                dropped = "".join(c.text for c in calls or () if isinstance(c, Dropped))
                if dropped:  # malformed elements beside the calls that stand
                    self.out.append(dropped)
        if ok:
            self.section_ok = self.after_call = self.markup_ok = True
        else:
            self.markup_ok = False
            self.out.append(self.pending + self.opened_by + body[:end_call])
        self.pending = ""
        return body[end_call:]

    def _close(self, inner: str) -> bool:
        """Incremental: the call's body is complete; send its rest, or flag it malformed."""
        reader = self.reader
        assert reader is not None
        self.reader = None
        ok = not self.rejected
        if ok:
            try:
                ok = self._events(reader.read(inner, len(inner)))
                rest = reader.close(inner) if ok else None
            except RecursionError:
                rest = None
            ok = rest is not None and self._events(rest) and bool(self.opened)
        if ok:
            self.delivered += len(self.opened)
            if self.dropped:  # malformed elements beside the calls that stand
                self.out.append(self.dropped)
        else:
            for i in self.opened:
                self.out.append(ToolCallDelta(i, malformed=True))
        self.opened = []
        self.dropped = ""
        self.rejected = False
        return ok

    def _events(self, events: list[Event]) -> bool:
        """Send a reader's events as call deltas; False once a name is rejected."""
        out = self.out
        for event in events:
            if isinstance(event, Dropped):
                self.dropped += event.text
                if event.named and self.opened:  # its name was sent: flag that call
                    out.append(ToolCallDelta(self.opened.pop(), malformed=True))
                continue
            name, frag = event
            if name is not None:
                if self.schemas is not None and name not in self.schemas:
                    self.rejected = True
                    return False
                out.append(ToolCallDelta(self.count, name, "", id=frag or None))
                self.opened.append(self.count)
                self.count += 1
            elif frag and self.opened:
                i = self.opened[-1]
                last = out[-1] if out else None
                if isinstance(last, ToolCallDelta) and last.index == i and last.name is None:
                    last.arguments += frag  # one fragment per call per step
                else:
                    out.append(ToolCallDelta(i, None, frag))
        return True

    def _stray(self, t: str, markup: bool) -> None:
        """Text outside calls; in markup context, trailing whitespace waits as pending."""
        if not t:
            return
        if not markup:
            self.out.append(t)
            self.markup_ok = False
            return
        j = len(t.rstrip())
        if j == 0:
            self.pending += t
            return
        self.markup_ok = False
        self.out.append(self.pending + t[:j])
        self.pending = t[j:]

    # -- public, per-parser API
    def feed(self, text: str) -> ParsedDelta:
        return _delta(self.step(text))

    def finish(self) -> ParsedDelta:
        delta = _delta(self.flush())
        delta.ended_with_tool_calls = self.delivered > 0
        return delta

    def fresh(self) -> ToolParser:
        return type(self)(self.fmt, INCREMENTAL if self.incremental else WHOLE, self.schemas)

    def parse_full(self, text: str) -> ParsedDelta:
        """The batch reference: a fresh parser of the same format over the whole output."""
        fresh = self.fresh()
        items = fresh.step(text) + fresh.flush()
        delta = _delta(items)
        delta.ended_with_tool_calls = fresh.delivered > 0
        return delta


def _grows(markers: tuple[str, ...], s: str, at: int, m: str) -> bool:
    """s[at:] (which starts with marker m) is still a proper prefix of a longer marker."""
    tail = s[at:]
    return any(len(x) > len(tail) and x.startswith(tail) for x in markers if x != m)


def _delta(items: list[Item]) -> ParsedDelta:
    if not items:
        return ParsedDelta()
    texts = [i for i in items if isinstance(i, str)]
    calls = [i for i in items if isinstance(i, ToolCallDelta)]
    thoughts = [i.text for i in items if isinstance(i, Thought)]
    return ParsedDelta("".join(texts), "".join(thoughts), calls or None)
