"""A tool-call format's grammar (`ToolFormat`), shared by every request that uses it.

How to add a format (why it is shaped this way):
  Write a module in this package that builds a `ToolFormat` and add one line to
  `formats.FORMATS`. A format says only what is specific to it: where a call opens
  (`call_open`, optionally inside a section wrapper), how its end is found (`CloseMarker`
  or an object with `end(body)`), and a per-call `CallReader` (`readers.py`) that turns
  the call's body, as it grows, into events. Everything that must be the same for every
  format lives in the engine (`tools.ToolParser`) and nowhere else: holding partial
  markers, call indices, rejecting names not in the request's `tools`, flags for
  malformed and cut calls, giving malformed calls back as text, and markup (wrappers,
  whitespace) around calls. So a new format cannot get those wrong, and the property
  tests of the engine cover it.
  `parse` is the format's whole-call parse for `tool_stream: "whole"` (one fragment when
  the call ends); a format without its own uses `readers.parse_with_reader`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .markers import MarkerSet
from .readers import Calls, ReaderFactory, parse_with_reader
from .schema import Schemas

# a format's own per-request class (Harmony's), built as the engine is:
# (format, tool_stream, schemas) -> the parser; the engine (`tools.ToolParser`) knows the
# format, the format names no engine
ParserClass = Callable[["ToolFormat", str, "Schemas | None"], Any]


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
                 parser: ParserClass | None = None,
                 typed_whole: Callable[[str, Schemas | None], Calls | None] | None = None
                 ) -> None:
        self.name = name
        self.section = section
        self.call_open = call_open
        self.unmarked = unmarked
        self.chain = chain if unmarked else ""
        self.parser = parser  # None: the engine itself (`tools.ToolParser`)
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
