"""Tool-call parsing over the content channel: one engine, one small grammar per format.

The engine (`ToolParser`) runs every format; a format (`tool_format.ToolFormat`) says only
where its calls open and end and how its per-call reader (`readers.CallReader`) reads a
call's body. tool_format.py says how to add one.

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

from collections.abc import Sequence
from typing import Any

from .call_deltas import CallDeltas
from .quotes import Quotes
from .readers import NO_FAST_PATH, CallReader, FastPath
from .schema import Schemas
from .tool_format import ToolFormat
from .types import Item, ParsedDelta, Thought, ToolCallDelta

# What `ToolParser.absorb` gives for a piece, typed so that the stream reads it without
# reaching into the parser: None, the piece must take `step`; a ToolCallDelta, the open
# call's argument fragment, all that the piece makes (the common piece inside a call); a
# sequence, the items the piece releases in output order (`NOTHING`: it only grew what
# is held), to be sent as a step's are.
Absorbed = ToolCallDelta | Sequence[Item] | None
NOTHING: tuple[Item, ...] = ()

TEXT, SECTION, CALL = 0, 1, 2
WHOLE, INCREMENTAL = "whole", "incremental"
TOOL_STREAMS = (INCREMENTAL, WHOLE)


class ToolParser:
    """Per-request state of one format; `feed` per content piece, `finish` once."""

    __slots__ = (
        "after_call",
        "body",
        "calls",
        "ender",
        "fresh_start",
        "fmt",
        "held",
        "home",
        "incremental",
        "loose_line",
        "markup_ok",
        "opened_by",
        "out",
        "path",
        "pending",
        "quotes",
        "reader",
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
        self.calls = CallDeltas(schemas)  # indices, names, flags: the output's calls
        self.section_ok = False  # a valid call was released in the current section
        self.after_call = False  # a valid call was released: whitespace may be markup
        self.loose_line = False  # in a damaged wrapper's line: all of it is markup
        self.markup_ok = False  # only whitespace since a valid call (a closer is markup)
        self.quotes = Quotes() if fmt.quotes else None
        self.opened_by = ""  # the marker that opened the open call ("" for an unmarked one)
        self.home = TEXT  # the state the open call returns to: TEXT when it is unwrapped
        self.fresh_start = bool(fmt.unmarked)  # `unmarked`: only whitespace seen so far
        # str (content) and ToolCallDelta items in output order, fresh per step
        self.out: list[Item] = []

    @property
    def markers(self) -> tuple[str, ...]:
        return self.fmt.markers

    def absorb(self, text: str) -> Absorbed:
        """Inside a call, a piece that cannot start or finish its close marker only grows it,
        so it needs none of `step`'s search for the call's end: None if it must go through
        `step`; else the delta of what it adds to the open call's arguments (`NOTHING` when
        that is nothing, as in whole mode, where nothing of a call leaves before its end),
        or, when the reader's events are more than fragments (the call's name, a malformed
        element), the items they make.

        Outside a call, with a marker prefix held, a piece that only grows it (the held
        text and the piece are still a prefix that `step` would hold whole) is absorbed
        too: `NOTHING`; and in TEXT state before any call, one after which the held text
        and the piece are plain text (no marker, nothing to hold: `<think>` in content)
        releases them: [that text], and the parser is idle again."""
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
        if fast is not None:
            opened = self.calls.opened
            if opened and not self.calls.rejected:
                frag = fast(len(body), text)
                if frag is not None:
                    self.body = ""
                    body += text  # the only reference: CPython grows it in place
                    self.body = body
                    return ToolCallDelta(opened[-1], None, frag) if frag else NOTHING
                del body
                return self._read(text, -1)
        del body  # `_grow` must hold the body's only reference, to grow it in place
        return self._grow(text)

    def _absorb_held(self, text: str) -> Absorbed:
        """`absorb` outside a call (its docstring's second part)."""
        held = self.held
        if not held or self.fresh_start or self.loose_line:
            return None
        s = held + text
        fmt = self.fmt
        if self.state == TEXT:
            if s in fmt.text_holds and not (self.markup_ok and fmt.chain):
                self.held = s
                return NOTHING
            # `_text` on s: no marker and no hold, outside markup context (no call yet)
            if not self.after_call and self.plain_text(s):
                self.held = ""
                if self.quotes is not None:
                    self.quotes.feed(s)
                self.markup_ok = False
                return [s]
        elif s in fmt.section_holds:
            self.held = s
            return NOTHING
        return None

    def _absorb_near(self, text: str, lo: int) -> Absorbed:
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
            return NOTHING
        ready = lo + fmt.close_set.hold_from(window)  # type: ignore[union-attr]
        if ready < lo + len(window) or not path.piece:
            return self._grow(text, ready)
        # all of it ready (a `<` in code that starts no marker), and the reader's `fast`
        # reads the piece alone: `_grow`'s common route
        return self._grow(text)

    def _grow(self, text: str, ready: int = -1) -> ToolCallDelta | Sequence[Item]:
        """`absorb`'s rest, once the piece is known not to end the call: the body grows
        by it, and the reader reads it up to `ready` (-1: all of it, no marker can start;
        only then may the reader's `fast` take the piece)."""
        if self.incremental and not self.calls.rejected:
            fast = self.path.fast
            opened = self.calls.opened
            if fast is not None and opened and ready < 0:
                frag = fast(len(self.body), text)
                if frag is not None:
                    body = self.body
                    self.body = ""
                    body += text
                    self.body = body
                    return ToolCallDelta(opened[-1], None, frag) if frag else NOTHING
            return self._read(text, ready)
        body = self.body
        self.body = ""
        body += text  # the only reference: CPython grows it in place
        self.body = body
        return NOTHING

    def _read(self, text: str, ready: int) -> ToolCallDelta | Sequence[Item]:
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
            return NOTHING
        opened = self.calls.opened
        if opened:
            if len(events) == 1:
                frag = events[0]
            else:  # several fragments of the open call (a key and its value's start): one
                frags = [e for e in events if isinstance(e, str)]
                frag = "".join(frags) if len(frags) == len(events) else None
            if isinstance(frag, str):
                return ToolCallDelta(opened[-1], None, frag) if frag else NOTHING
        out = self.out = []
        self.calls.take(events, out)
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
            if self.calls.cut(out):
                tail = self.calls.dropped  # the calls stand: only malformed elements are text
            else:
                tail = self.pending + self.opened_by + self.body
        tail += self.held
        if tail:
            out.append(tail)
        self.held = self.pending = self.body = ""
        self.calls.begin()
        self.reader = None
        self.state = TEXT
        self.loose_line = self.markup_ok = False
        return out

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
            self.calls.begin()
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
            if self.incremental and not self.calls.rejected:
                cs = self.fmt.close_set
                ready = len(body) if cs is None else cs.hold_from(body)
                self.calls.take(self.reader.read(body, ready), self.out)  # type: ignore[union-attr]
                if path.fast_now is not None:
                    path.fast = path.fast_now()
            return ""
        self.ender = None
        self.state = self.home
        inner = body[:end_body]
        reader, self.reader = self.reader, None
        if reader is not None:  # incremental
            ok = self.calls.close(reader, inner, self.out)
        else:
            try:
                calls = self.fmt.parse(inner, self.schemas)
            except RecursionError:  # JSON nested beyond the interpreter's depth: malformed
                calls = None
            ok = self.calls.whole(calls, self.out)
        if ok:
            self.section_ok = self.after_call = self.markup_ok = True
        else:
            self.markup_ok = False
            self.out.append(self.pending + self.opened_by + body[:end_call])
        self.pending = ""
        return body[end_call:]

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
        delta.ended_with_tool_calls = self.calls.delivered > 0
        return delta

    def fresh(self) -> ToolParser:
        return type(self)(self.fmt, INCREMENTAL if self.incremental else WHOLE, self.schemas)

    def parse_full(self, text: str) -> ParsedDelta:
        """The batch reference: a fresh parser of the same format over the whole output."""
        fresh = self.fresh()
        items = fresh.step(text) + fresh.flush()
        delta = _delta(items)
        delta.ended_with_tool_calls = fresh.calls.delivered > 0
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
