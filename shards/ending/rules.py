"""How a request ends: every end-of-request rule, once (applied by ending/assembly.py).

A last row differs from a running one in five ways, each decided here: the scheduler's
stop token is left out of the text (`trims_stop_token`, `blank_stop_tokens`, before the row
is decoded); bytes still held for an incomplete character (or an open byte run) come out by
the codec's final rules (the decoder's `flush`); the ids still pending attribution are
placed (`finish_row`, or a per-row request's `Attributor`); a stop string the scheduler
matched is cut at its last occurrence (`cut_matched`, looking back on what was sent:
shards/ending/sent.py); and the final usage is the request's own numbers (`usage`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.finish import Finish, Stop, stop_token
from sglang_tok.protocols.model.deltas import Usage

from ..decoding.attribution import ZERO_WIDTH
from ..decoding.interface import Attribution, Carry

I64 = npt.NDArray[np.int64]
# how much already-sent text a scheduler-matched stop string's cut looks back on (protocol
# rule 3: cut at its last occurrence, never unsending text)
SENT_TAIL = 64


class End(NamedTuple):
    """A message row that is its request's last (`Sparse.ends`, less the row number)."""

    finish: Finish
    prompt: int
    cached: int
    reasoning: int


Ends = dict[int, End]  # message row -> its request's end


def ends_of(sparse_ends: list[tuple[int, Finish, int, int, int]]) -> Ends:
    return {row: End(fin, prompt, cached, reasoning)
            for row, fin, prompt, cached, reasoning in sparse_ends}


def usage(prompt: int, completion: int, cached: int, reasoning: int) -> Usage:
    return Usage(prompt, completion, prompt + completion, cached, reasoning)


# ------------------------------------------------------------------ the stop token
def trims_stop_token(finish: Finish | None, no_stop_trim: bool, ids: list[int]) -> bool:
    """Whether a last row's final id is the scheduler's stop token, left out of the text
    (`finish.matched` an id or ids; not with `no_stop_trim`)."""
    return bool(ids) and not no_stop_trim and stop_token(finish, ids[-1])


def blank_stop_tokens(rows: list[int], ends: Ends, ids: I64, id_starts: I64,
                      no_trim: Any, vocab: int, stops: dict[int, int]) -> I64:
    """The message's ids with the stop token of each of these last rows made
    out-of-vocabulary (no text), for decoders that take a message's rows whole; the output
    keeps the real ids. `no_trim(row)`: the row's request asked for `no_stop_trim`.
    `stops` gets each such row's stop token (attribution makes it zero-width)."""
    blank: list[int] = []
    for row in rows:
        fin = ends[row].finish
        if type(fin) is not Stop:  # most last rows: a length
            continue
        a, b = int(id_starts[row]), int(id_starts[row + 1])
        if trims_stop_token(fin, no_trim(row), ids[a:b].tolist()):
            blank.append(b - 1)
            stops[row] = int(ids[b - 1])
    if not blank:
        return ids
    ids = ids.astype(np.int64, copy=True)
    ids[blank] = vocab
    return ids


# ------------------------------------------------------------------ a matched stop string
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


def cut_after_matched(text: str, matched: str, older: Iterable[str]) -> int | None:
    """Where the text is cut so that it ends with a scheduler-matched stop string's last
    occurrence (no_stop_trim on SGLang 0.5.14 on: the stop string stays, what follows it
    goes), looked for as `cut_matched` looks; 0 when it ended in sent text; None when it
    does not occur."""
    at = text.rfind(matched)
    if at >= 0:
        return at + len(matched)
    tail = ""
    for piece in older:
        tail = piece + tail
        joined = tail[-SENT_TAIL:] + text
        at = joined.rfind(matched)
        if at >= 0:
            return max(0, at + len(matched) - (len(joined) - len(text)))
        if len(tail) >= SENT_TAIL:
            break
    return None


def cut_attributions(entries: list[Attribution], at: int) -> list[Attribution]:
    """A row's attributions after its text is cut at byte `at`: the anchors there and past
    it collapse onto the cut, zero-width (`Attributor.cut`)."""
    return [(tid, ZERO_WIDTH, at) if off >= at else (tid, kind, off)
            for tid, kind, off in entries]


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
