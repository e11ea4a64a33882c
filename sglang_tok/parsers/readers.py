"""The per-call reader interface: what a format's reader gives the engine, and the
pieces readers share (a state machine's loop, a head read before its arguments).

A format's per-call `CallReader` turns the call's body, as it grows, into `Event`s, a
typed union the engine reads in one place (`call_deltas.CallDeltas.take`) and a whole
parse folds in one place (`fold`): `Opened(name)` when a call's name is known (`Opened(name, id)`
when the format writes a call id, which reaches the client as the first delta's `id`),
then fragments (a `str`) of its arguments JSON; a body that holds several calls reports a
malformed element as `Dropped`. A whole-call parse gives `Call`s. A reader obeys three
rules, which make stream == batch hold by construction:
  - decide only on `body[:ready]` (beyond it may be the start of the end marker);
  - emit only what no later text can change (a JSON reader holds its value's closing
    brace; a string value's possible trailing newline is held where the format strips it);
  - `close(body)` either returns the rest, so that everything emitted for the call
    concatenates to its final arguments (the same text a batch parse gives), or None
    when the call is malformed. Emitted text is never taken back; the engine flags it.
A format without its own whole-call parse runs its reader once (`parse_with_reader`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import msgspec

from .schema import Schemas

_WS = re.compile(r"\s*")


class Opened(msgspec.Struct, frozen=True, gc=False):
    """A call's head, certain: its name, and the id the format writes for it ("": none)."""

    name: str
    id: str = ""


class Dropped(msgspec.Struct, frozen=True, gc=False):
    """A malformed element of a call body that holds several calls (hermes' JSON array).

    Its siblings must not pay for it: the engine gives its text back as content and, when
    its name was already sent (`named`), flags that call malformed, while the well-formed
    elements stand. Only when no element stands is the whole body text, as for one call.
    """

    text: str
    named: bool = False


class Call(msgspec.Struct, frozen=True, gc=False):
    """One call of a whole-call parse: its name, its arguments JSON, and its id (None: the
    format writes none)."""

    name: str
    arguments: str
    id: str | None = None


# a whole-call parse: its calls, and a `Dropped` element where the body holds several
# calls and one is malformed
Calls = list[Call | Dropped]
# what a reader gives, in order: `Opened` starts a call, a str extends the arguments of
# the call opened last, `Dropped` is a malformed element (its text given back)
Event = str | Opened | Dropped


def fold(events: list[Event]) -> Calls:
    """A reader's events as whole calls, in order: each `Opened` with the fragments after
    it; a `Dropped` element as itself, the call its name opened (`named`) taken out."""
    calls: list[tuple[Opened, list[str]] | Dropped] = []
    frags: list[str] | None = None  # the fragments of the call opened last
    for event in events:
        if isinstance(event, str):
            if frags is not None:
                frags.append(event)
        elif isinstance(event, Opened):
            frags = []
            calls.append((event, frags))
        else:
            if event.named and frags is not None:
                calls.pop()
            frags = None
            calls.append(event)
    return [c if isinstance(c, Dropped) else Call(c[0].name, "".join(c[1]), c[0].id or None)
            for c in calls]


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
        calls = fold(events + rest)
        # (no reader run this way emits `Dropped`)
        return None if any(isinstance(c, Dropped) for c in calls) else calls or None
    return parse
