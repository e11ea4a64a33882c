"""JSON readers: where a JSON value ends, and a call's arguments object passed through as
the model wrote it, read as the body grows.

Every one is resumable (each call scans only what is new) and decides nothing a later
piece could change: an object's closing brace is held until the call ends, a string's
backslash until its escaped character arrives. Validity is decided once, by a whole parse
when the call ends (`ObjectArgs.close`, or the format's own close), never by the scan.
Each has a `skip`/`fast` for a piece appended to the body, which reads only the piece:
the engine's shortcut for the common piece inside a call (`readers.FastPath`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .jsonio import dumps, loads
from .readers import Event


def arguments_json(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    return dumps(obj)


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

    def after(self, body: str) -> str | None:
        """What follows the value in `body` (the format's tail to check at the call's
        close); None while the value has not ended."""
        return None if self.end < 0 else body[self.end:]

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
            out.append(frag)

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read` (`readers.FastPath`): `RawArgs.fast` once the
        object started, else None."""
        return None if self.args is None else self.args.fast

    def close(self, body: str) -> list[Event] | None:
        args = self.args
        if self.bad:
            return None
        if args is None:
            return None if body[self.after:].strip() else ["{}"]
        tail = args.after(body)
        if tail is None or tail.strip():
            return None
        try:
            if not isinstance(loads(body[args.start:args.end]), dict):
                return None
        except ValueError:
            return None
        return [args.rest(body)]


def object_arguments(text: str) -> str | None:
    """Whole mode for `ObjectArgs`: the object re-serialised, `{}` for blank, or None."""
    if not text.strip():
        return "{}"
    try:
        return arguments_json(loads(text))
    except ValueError:
        return None

