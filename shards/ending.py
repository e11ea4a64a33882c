"""How a request ends: every end-of-request rule, once, for every path through the shard.

A last row differs from a running one in five ways, and each is decided here: the
scheduler's stop token is left out of the text (`trims_stop_token`, `blank_stop_tokens`);
a stop string the scheduler matched is cut at its last occurrence (`stop_string`,
`cut_matched`); bytes still held for an incomplete character come out by the codec's final
rules (the decoder's `flush`); the ids still pending attribution are placed (`end_attributions`);
and the final usage is the request's own numbers (`usage`). The array path (shards/table.py)
and the per-row path (shards/request.py) both call these, so a rule changes in one place.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from sglang_tok.protocol import Usage

from .attributed import Attribution, finish_row
from .attribution import ZERO_WIDTH
from .row_decoder import Decoded

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
def end_attributions(state: Slots, attrs: list[list[Attribution] | None], at: list[int],
                     slots: I64, rows: list[int], texts: list[str], flushed: set[int],
                     stops: dict[int, int]) -> None:
    """The ids last rows decoded as running ones leave pending (at[k] among the rows,
    message row rows[k], its text before the flush texts[k]) are placed by
    `attributed.finish_row` (`flushed`: rows whose held bytes came out as U+FFFD; `stops`:
    the rows' trimmed stop tokens)."""
    carry = state.carry
    for j, slot, row, text in zip(at, slots.tolist(), rows, texts):
        left = carry.pop(slot, None)
        got = attrs[j]
        if left and got is not None:
            attrs[j] = finish_row(got, left, len(text.encode()), j in flushed, stops.get(row))
