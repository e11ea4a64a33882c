"""Stop strings found by the service itself (protocol rule 3).

Semantics are those of a search over the whole text for the earliest-starting stop
string, evaluated as text streams in: a match is final only once no stop string that
starts earlier can still complete, so the cut does not depend on how ids were chunked.
At most `max(len(stop)) - 1` characters are held back, and only while they could begin
a stop string.
"""

from __future__ import annotations


class StopMatcher:
    __slots__ = ("stops", "held", "_longest", "_firsts")

    def __init__(self, stops: list[str]) -> None:
        self.stops = sorted({s for s in stops if s}, key=len)
        self.held = ""
        self._longest = max(map(len, self.stops), default=0)
        self._firsts = frozenset(s[0] for s in self.stops)

    def __bool__(self) -> bool:
        return bool(self.stops)

    def feed(self, text: str, final: bool = False) -> tuple[str, int, str | None]:
        """Take new text; return (releasable text, cut offset in it or -1, matched stop).

        With a match, the returned text ends at the start of the stop string (the caller
        decides whether to append it) and the request is over.
        """
        if not self.held and not final:
            # the common row: no stop can start in text without one of its first characters
            for c in self._firsts:
                if c in text:
                    break
            else:
                return text, -1, None
        buf = self.held + text if self.held else text
        best_at, best = -1, None
        for s in self.stops:  # shortest first: ties at one start go to the shortest
            at = buf.find(s)
            if at >= 0 and (best_at < 0 or at < best_at):
                best_at, best = at, s
        hold = len(buf) if final else self._pending_start(buf)
        if best is not None and best_at <= hold:
            self.held = ""
            return buf[:best_at], best_at, best
        self.held = buf[hold:]
        return buf[:hold], -1, None

    def _pending_start(self, buf: str) -> int:
        """Earliest index from which the tail of buf is a proper prefix of some stop.

        Only positions holding a stop's first character can start one, and `str.find`
        jumps between those at C speed: the common tail (no such character) costs one
        `find` per distinct first character, not a Python step per character.
        """
        n = len(buf)
        lo = max(0, n - self._longest + 1)
        best = n
        stops = self.stops
        for c in self._firsts:
            at = buf.find(c, lo, best)
            while at >= 0:
                tail = buf[at:]
                if any(len(s) > n - at and s.startswith(tail) for s in stops):
                    best = at
                    break
                at = buf.find(c, at + 1, best)
        return best
