"""Marker search with bounded hold-back, and the special ids a parser must see.

Per-chunk work is a few `str.find` calls over the new text; only a suffix that could
still grow into a marker is held, found by looking at the positions of markers' first
characters in the last `longest - 1` characters (no per-character loop).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..tokenizer import TokenizerInfo


class MarkerSet:
    """A fixed set of marker strings: earliest match, and the held suffix."""

    __slots__ = ("firsts", "markers", "prefixes", "reach")

    def __init__(self, markers: Iterable[str]) -> None:
        self.markers = tuple(dict.fromkeys(m for m in markers if m))
        self.firsts = tuple(dict.fromkeys(m[0] for m in self.markers))
        self.prefixes = frozenset(m[:k] for m in self.markers for k in range(1, len(m)))
        self.reach = max(map(len, self.markers), default=1) - 1

    def find(self, s: str, start: int = 0, end: int | None = None) -> tuple[int, str]:
        """Earliest (index, marker) in s[start:end]; ties go to the longest; (-1, "") if none."""
        best, which = -1, ""
        for m in self.markers:
            at = s.find(m, start, end)
            if at >= 0 and (best < 0 or at < best or (at == best and len(m) > len(which))):
                best, which = at, m
        return best, which

    def hold_from(self, s: str, start: int = 0, end: int | None = None) -> int:
        """Smallest i >= start with s[i:end] a proper prefix of a marker; `end` if none.

        The caller has already found no whole marker in s[start:], so a position released
        here can never start a marker later: the held part depends only on the text so far,
        not on how it was chunked.
        """
        n = len(s) if end is None else end
        lo = max(start, n - self.reach)
        best = n
        prefixes = self.prefixes
        for c in self.firsts:
            at = s.find(c, lo, best)
            while at >= 0:
                if s[at:n] in prefixes:
                    best = at
                    break
                at = s.find(c, at + 1, best)
        return best


def marker_token_ids(info: TokenizerInfo, markers: Iterable[str]) -> frozenset[int]:
    """Special ids whose text is part of a marker: they must reach the parser.

    With `skip_special_tokens` the shard drops every other special id (by id, as the full
    decode would) and keeps these, so a marker that is a special token is never stripped
    before the parser sees it (SGLang #28489), while a special token's text written with
    ordinary tokens is never mistaken for one.
    """
    ms = tuple(markers)
    keep = set()
    for tid in info.special_ids:
        text = info.token_texts.get(tid, "")
        if text and any(text in m for m in ms):
            keep.add(tid)
    return frozenset(keep)

