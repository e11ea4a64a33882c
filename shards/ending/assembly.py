"""A request's end in one place: every end rule (shards/ending/rules.py), in order.

`end_rows` applies them to a message's last rows as their decoder produced them: the
array path's (many at once), a per-row request's last row or its ERROR/ABORT (one; its
service stop strings or parser see the text between the flush and the cut), and a plain
request's ERROR/ABORT; as vLLM's detokenizer applies every end rule in one `update` and
its backends only decode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from sglang_tok.finish import Finish, stop_string
from sglang_tok.protocols.model.deltas import Usage

from ..decoding.attribution import Attributor
from ..decoding.interface import Attribution, Decoded, RowDecoder
from ..decoding.slots import Slots
from .rules import cut_after_matched, cut_attributions, cut_matched, finish_row, usage

# a per-row request's own rules between the flush and the cut (service stop strings, a
# parser): (the row's text, what the flush added) -> (the text, the finish they set or None)
Between = Callable[[str, str], tuple[str, "Finish | None"]]


class LastRow:
    """One request's last row, as its path hands it to `end_rows`: its text's place among
    the decoded rows (`j`), its slot, its finish, the stop token left out of its ids
    (`stop`), the numbers of its final usage (prompt, completion, cached, reasoning), and:

    - `no_stop_trim`: the request keeps the scheduler's stop token and stop string;
      `through`: and the text after a matched stop string is cut (OPEN trim_after_stop);
    - `control`: an ERROR or ABORT ends it (its finish stays, nothing is cut);
    - `attr`: a per-row request's `Attributor` (else the array path's entries, if any, are
      `decoded.attrs[j]` and the slot's carry);
    - `sent`, `older`: characters the request sent before, and that text (newest piece
      first, read only as far as a matched stop string needs); `unsend`: nothing was sent
      yet (stream=false), so the cut may reach into `older`;
    - `between`: the per-row request's service stop strings or parser.

    `end_rows` sets the row's text, its `finish` (a service stop string may set it), its
    `usage`, and `taken_back`: characters of `older` the cut took back (stream=false)."""

    __slots__ = ("j", "slot", "finish", "stop", "numbers", "no_stop_trim", "control", "attr",
                 "sent", "older", "unsend", "between", "usage", "taken_back", "through")

    def __init__(self, j: int, slot: int, finish: Finish,
                 numbers: tuple[int, int, int, int], stop: int | None = None,
                 no_stop_trim: bool = False, control: bool = False,
                 attr: Attributor | None = None, sent: int = 0,
                 older: Iterable[str] = (), unsend: bool = False,
                 between: Between | None = None, through: bool = False) -> None:
        self.j, self.slot, self.finish, self.numbers, self.stop = j, slot, finish, numbers, stop
        self.no_stop_trim, self.control, self.attr = no_stop_trim, control, attr
        self.sent, self.older, self.unsend, self.between = sent, older, unsend, between
        self.through = through
        self.usage: Usage | None = None
        self.taken_back = 0


def end_rows(decoder: RowDecoder, state: Slots, decoded: Decoded,
             rows: list[LastRow]) -> None:
    """Every end rule, in order, on these last rows' texts in `decoded` (and their
    attributions in `decoded.attrs`), in place: held bytes flushed, attribution's last ids
    placed, [a per-row request's stop strings or parser], a matched stop string cut, usage."""
    attrs = decoded.attrs
    flushed: dict[int, str] = {}
    batch = [r for r in rows if r.attr is None]  # held bytes, by the codec's final rules
    if batch:
        flushed = dict(zip(*decoder.flush(state, [r.j for r in batch],
                                          np.array([r.slot for r in batch], np.int64))))
    for r in rows:
        j = r.j
        text = decoded.text_of(j)
        if r.attr is not None:  # the family's rule places what the slot held
            if r.stop is not None:
                r.attr.zero_width(r.stop)
            more = decoder.flush_attributed(state, r.slot, r.attr)
        else:
            more = flushed.get(j, "")
            got = attrs[j] if attrs is not None else None
            if got is not None:
                assert attrs is not None
                attrs[j] = finish_row(got, state.carry.pop(r.slot, None), len(text.encode()),
                                      bool(more), r.stop)
        stopped = None
        was = text
        if r.between is not None:
            text, stopped = r.between(text, more)
        elif more:
            text += more
        if stopped is not None:
            if not r.control:
                r.finish = stopped
        elif not r.control and (r.through or not r.no_stop_trim):
            matched = stop_string(r.finish)
            if matched:
                text = _cut(r, text, matched, attrs, r.no_stop_trim)
        if text is not was:
            decoded.set(j, text)
        r.usage = usage(*r.numbers)


def _cut(r: LastRow, text: str, matched: str, attrs: list[list[Attribution] | None] | None,
         after: bool = False) -> str:
    """A scheduler-matched stop string's cut, in the text and in its attributions: before
    its last occurrence, or (`after`: no_stop_trim on a release that cuts there) after it."""
    if r.unsend:  # nothing was sent: the cut may reach into the text so far
        older = "".join(r.older)
        at = (older + text).rfind(matched)
        keep = None if at < 0 else at - len(older) + (len(matched) if after else 0)
    elif after:
        keep = cut_after_matched(text, matched, r.older)
    else:
        keep = cut_matched(text, matched, r.older)
    if keep is None:
        return text
    if r.attr is not None:
        r.attr.cut(r.sent + keep)
    elif attrs is not None and attrs[r.j] is not None:
        attrs[r.j] = cut_attributions(attrs[r.j], len(text[:keep].encode()))  # type: ignore[arg-type]
    if keep < 0:
        r.taken_back = -keep
        return ""
    return text[:keep]
