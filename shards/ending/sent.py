"""What a shard sent for its plain rows, for a scheduler-matched stop string's cut.

Rule 3 cuts a scheduler-matched stop string at its last occurrence, never unsending text,
so a request's last row needs the text its request sent before it (`rules.SENT_TAIL`
characters). A per-row request keeps its own; a plain request's is read back from the
shard's last messages here, only at such a cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from ..decoding.interface import Decoded

I64 = npt.NDArray[np.int64]
# over how many of the shard's last messages a plain request's sent text is remembered
LOG_MESSAGES = 256


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
