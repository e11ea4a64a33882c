"""How a request ends: every end-of-request rule, once, and one assembly of them.

A last row differs from a running one in five ways, each decided here: the scheduler's
stop token is left out of the text (`trims_stop_token`, `blank_stop_tokens`, before the row
is decoded); bytes still held for an incomplete character (or an open byte run) come out by
the codec's final rules (the decoder's `flush`); the ids still pending attribution are
placed (`finish_row`, or a per-row request's `Attributor`); a stop string the scheduler
matched is cut at its last occurrence (`cut_matched`, looking back on what was sent); and
the final usage is the request's own numbers (`usage`). `end_rows` applies them in that
order to a message's last rows as their decoder produced them: the array path's (many at
once), a per-row request's last row or its ERROR/ABORT (one; its service stop strings or
parser see the text between the flush and the cut), and a plain request's ERROR/ABORT.
As vLLM's detokenizer applies every end rule in one `update` and its backends only decode.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.protocol import Usage

from .attribution import ZERO_WIDTH, Attributor
from .row_decoder import Attribution, Carry, Decoded, RowDecoder

if TYPE_CHECKING:  # the slots hold requests: no import cycle at run time
    from .slots import Slots

I64 = npt.NDArray[np.int64]
# how much already-sent text a scheduler-matched stop string's cut looks back on (protocol
# rule 3: cut at its last occurrence, never unsending text), and over how many of the
# shard's last messages a plain request's sent text is remembered
SENT_TAIL = 64
LOG_MESSAGES = 256


class End(NamedTuple):
    """A message row that is its request's last (`Sparse.ends`, less the row number)."""

    finish: dict[str, Any]
    prompt: int
    cached: int
    reasoning: int


Ends = dict[int, End]  # message row -> its request's end


def ends_of(sparse_ends: list[tuple[int, dict[str, Any], int, int, int]]) -> Ends:
    return {row: End(fin, prompt, cached, reasoning)
            for row, fin, prompt, cached, reasoning in sparse_ends}


def usage(prompt: int, completion: int, cached: int, reasoning: int) -> Usage:
    return Usage(prompt, completion, prompt + completion, cached, reasoning)


# ------------------------------------------------------------------ the stop token
def trims_stop_token(finish: dict[str, Any] | None, no_stop_trim: bool, ids: list[int]) -> bool:
    """Whether a last row's final id is the scheduler's stop token, left out of the text
    (`finish.matched` an id or ids; not with `no_stop_trim`)."""
    return bool(ids) and finish is not None and not no_stop_trim and \
        finish.get("type") == "stop" and _is_stop_token(finish.get("matched"), ids[-1])


def _is_stop_token(matched: Any, last: int) -> bool:
    if isinstance(matched, bool):
        return False
    if isinstance(matched, int):
        return matched == last
    if isinstance(matched, list):
        return last in matched
    return False


def blank_stop_tokens(rows: list[int], ends: Ends, ids: I64, id_starts: I64,
                      no_trim: Any, vocab: int, stops: dict[int, int]) -> I64:
    """The message's ids with the stop token of each of these last rows made
    out-of-vocabulary (no text), for decoders that take a message's rows whole; the output
    keeps the real ids. `no_trim(row)`: the row's request asked for `no_stop_trim`.
    `stops` gets each such row's stop token (attribution makes it zero-width)."""
    blank: list[int] = []
    for row in rows:
        fin = ends[row].finish
        a, b = int(id_starts[row]), int(id_starts[row + 1])
        if fin.get("type") == "stop" and trims_stop_token(fin, no_trim(row), ids[a:b].tolist()):
            blank.append(b - 1)
            stops[row] = int(ids[b - 1])
    if not blank:
        return ids
    ids = ids.astype(np.int64, copy=True)
    ids[blank] = vocab
    return ids


# ------------------------------------------------------------------ a matched stop string
def stop_string(finish: dict[str, Any]) -> str | None:
    """The stop string the scheduler matched, which the per-row rules cut (None: none)."""
    matched = finish.get("matched")
    return matched if isinstance(matched, str) else None


def cut_matched(text: str, matched: str, older: Iterable[str]) -> int | None:
    """Where a scheduler-matched stop string's last occurrence starts in `text`, looked for
    in `text` and the last SENT_TAIL characters sent before it (`older`: the text sent, a
    piece at a time, newest first, read only as far as needed); 0 when it began in sent
    text (that text is never unsent); None when it does not occur."""
    at = text.rfind(matched)
    if at >= 0:
        return at
    tail = ""
    for piece in older:
        tail = piece + tail
        if matched in tail[-SENT_TAIL:] + text:
            return 0
        if len(tail) >= SENT_TAIL:
            break
    return None


def cut_attributions(entries: list[Attribution], at: int) -> list[Attribution]:
    """A row's attributions after its text is cut at byte `at`: the anchors there and past
    it collapse onto the cut, zero-width (`Attributor.cut`)."""
    return [(tid, ZERO_WIDTH, at) if off >= at else (tid, kind, off)
            for tid, kind, off in entries]


class SentLog:
    """The text a shard sent for its plain rows, message by message, for a scheduler-matched
    stop string at a request's end (rule 3 needs the text it sent before its last row):
    references to each message's decoded rows, no copy and no work per row. A lookup walks
    back from the newest message, and only as far as the cut needs (most stop strings lie in
    the last row's text, or begin in the row before)."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        # (the shard's row number of the message's first row, the plain rows' message rows
        # and slots, their texts)
        self.messages: deque[tuple[int, I64, I64, Decoded]] = deque(maxlen=LOG_MESSAGES)

    def add(self, base: int, rows: I64, slots: I64, decoded: Decoded) -> None:
        self.messages.append((base, rows, slots, decoded))

    def older(self, slot: int, since: int, before: int) -> Iterator[str]:
        """The texts of the slot's plain rows numbered in [since, before), newest first."""
        for base, rows, slots, decoded in reversed(self.messages):
            if base + int(rows[-1]) < since:  # (a message's plain rows are never none)
                return
            for j in reversed((slots == slot).nonzero()[0].tolist()):
                row = base + int(rows[j])
                if row < since:
                    return
                if row < before:
                    yield decoded.text_of(j)


# ------------------------------------------------------------------ held bytes, attribution


# ------------------------------------------------------------------ attribution's last ids
def finish_row(released: list[Attribution], carry: Carry | None, text_bytes: int,
               flushed: bool, stop: int | None) -> list[Attribution]:
    """A last row's attributions on the array path, decoded as a running row's (its stop
    token an empty, visible id: always carried, last), with the entries its slot still
    carries (`Slots.carry`): the trimmed stop token (`stop`, its real id) is zero-width; the
    flush's text (`flushed`: the held bytes came out as U+FFFD) anchors pending ids where it
    begins, the row's text end; with no flush text they become zero-width there (as
    `Attributor.end`)."""
    if not carry:
        return released
    out = list(released)
    last = len(carry) - 1
    for k, (tid, kind) in enumerate(carry):
        if stop is not None and k == last:
            tid, kind = stop, ZERO_WIDTH
        elif not flushed:
            kind = ZERO_WIDTH
        out.append((tid, kind, text_bytes))
    return out


# ------------------------------------------------------------------ the assembly
# a per-row request's own rules between the flush and the cut (service stop strings, a
# parser): (the row's text, what the flush added) -> (the text, the finish they set or None)
Between = Callable[[str, str], tuple[str, "dict[str, Any] | None"]]


class LastRow:
    """One request's last row, as its path hands it to `end_rows`: its text's place among
    the decoded rows (`j`), its slot, its finish, the stop token left out of its ids
    (`stop`), the numbers of its final usage (prompt, completion, cached, reasoning), and:

    - `no_stop_trim`: the request keeps the scheduler's stop token and stop string;
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
                 "sent", "older", "unsend", "between", "usage", "taken_back")

    def __init__(self, j: int, slot: int, finish: dict[str, Any],
                 numbers: tuple[int, int, int, int], stop: int | None = None,
                 no_stop_trim: bool = False, control: bool = False,
                 attr: Attributor | None = None, sent: int = 0,
                 older: Iterable[str] = (), unsend: bool = False,
                 between: Between | None = None) -> None:
        self.j, self.slot, self.finish, self.numbers, self.stop = j, slot, finish, numbers, stop
        self.no_stop_trim, self.control, self.attr = no_stop_trim, control, attr
        self.sent, self.older, self.unsend, self.between = sent, older, unsend, between
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
        elif not (r.control or r.no_stop_trim) and r.finish.get("type") == "stop":
            matched = stop_string(r.finish)
            if matched:
                text = _cut(r, text, matched, attrs)
        if text is not was:
            decoded.set(j, text)
        r.usage = usage(*r.numbers)


def _cut(r: LastRow, text: str, matched: str, attrs: list[list[Attribution] | None] | None
         ) -> str:
    """A scheduler-matched stop string's cut, in the text and in its attributions."""
    if r.unsend:  # nothing was sent: the cut may reach into the text so far
        older = "".join(r.older)
        at = (older + text).rfind(matched)
        keep = None if at < 0 else at - len(older)
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
