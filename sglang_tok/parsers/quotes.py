"""Whether content so far ends inside Markdown code, so that markup quoted there is text.

A model explaining its own tool-call format quotes the markup in a code fence or an inline
code span; a format with `quotes` (DSML) reads such markers as text, never as a call.
"""

from __future__ import annotations

import re

_QUOTE_CH = re.compile(r"[`~\n]")


class Quotes:
    """Whether the text so far ends inside Markdown code: a fence (a line starting, after at
    most 3 spaces, with 3+ backticks or tildes, closed by a line starting with at least as
    many of the same) or an inline span (a backtick run, closed by a run of the same length
    on the same line; a span left open ends with its line). Fed the text outside calls.

    `quiet`: mid-line, no run under way, so a piece without a newline, backtick or tilde
    changes nothing; the stream's shortcut for plain content tests it instead of feeding
    such a piece (the common piece of a DSML request's content)."""

    __slots__ = ("fence_c", "fence_n", "inline", "lead", "line", "quiet", "run_c", "run_line",
                 "run_n")

    def __init__(self) -> None:
        self.fence_c = ""
        self.fence_n = 0
        self.inline = 0
        self.line = True  # at a line's start (only spaces, at most 3, since it began)
        self.lead = 0
        self.run_c = ""
        self.run_n = 0
        self.run_line = False
        self.quiet = False

    def feed(self, t: str) -> None:
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
            self.quiet = not self.line
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
                    break
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
        self.quiet = not self.line and not self.run_n

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
            self.quiet = not self.line
        return bool(self.fence_n or self.inline)

    def markup(self) -> None:
        """Markup (a section or call) was taken out: the next text is mid-line."""
        if self.run_n:
            self._end_run()
        self.line = False
        self.quiet = True
