"""Token attribution's bookkeeping: which token ids produced which part of a request's text.

Every pushed id gets exactly one attribution, in push order. An id whose text appears is
"visible" at the start of that new text; ids pending (partial UTF-8) are anchored there too
once the text comes. Ids of a byte-fallback run are anchored per character when the run
ends (`run_ended`, with the offsets the run rule gives: shards/decoding/runs.py). A
skipped special id is zero-width at the current text length; ids still pending at the end
are zero-width at the end. Anchors are character positions in the request's decoded text,
turned into UTF-8 byte offsets local to the delta that releases them. Where each id is
anchored is its tokenizer family's rule, beside its decoder
(shards/byte_level/attribution.py for byte-level BPE), or the byte-run rule two families
share (shards/decoding/runs.py: byte fallback, and the window family's byte runs); this
queue is what a per-row request keeps of them between rows (service stop strings may hold
text back, or cut it).
"""

from __future__ import annotations

VISIBLE = 0
ZERO_WIDTH = 1
PENDING = -1


class Attributor:
    __slots__ = ("queue", "decoded", "_first_pending")

    def __init__(self) -> None:
        self.queue: list[list[int]] = []  # [token_id, kind, anchor]; anchor -1 = pending
        self.decoded = 0  # characters of decoded text so far
        self._first_pending = 0

    def zero_width(self, tid: int) -> None:
        self.queue.append([tid, ZERO_WIDTH, self.decoded])

    def pushed(self, tid: int, text_len: int) -> None:
        """An id went into the decoder and `text_len` new characters came out."""
        self.queue.append([tid, VISIBLE, PENDING])
        if text_len:
            self.produced(text_len)

    def hold(self, tid: int, kind: int) -> None:
        """An id whose anchor the decoder will give later (`run_ended`), in push order."""
        self.queue.append([tid, kind, PENDING])

    def run_ended(self, offsets: list[int], run_len: int, text_len: int,
                  tid: int | None = None) -> int:
        """A byte run's text (`run_len` chars) came out, then the ending id's own text.

        `offsets[i]` is where, in the new text, the text completed by the i-th pending id
        begins. An id whose text would begin past the run stays pending if the ending id
        added nothing (its text comes later); zero-width ids never wait. `tid` is the id
        that ended the run, anchored at the start of its own text. Returns how many ids
        stay pending.
        """
        queue, at = self.queue, self.decoded
        own = text_len > run_len
        first = -1
        i = 0
        for n in range(self._first_pending, len(queue)):
            entry = queue[n]
            if entry[2] != PENDING:
                continue
            off = offsets[i]
            i += 1
            if off < run_len or own or entry[1] == ZERO_WIDTH:
                entry[2] = at + off
            elif first < 0:
                first = n
        if tid is not None:
            queue.append([tid, VISIBLE, at + run_len if own else PENDING])
            if not own and first < 0:
                first = len(queue) - 1
        self._first_pending = len(queue) if first < 0 else first
        self.decoded += text_len
        return sum(1 for n in range(self._first_pending, len(queue)) if queue[n][2] == PENDING)

    def produced(self, text_len: int) -> None:
        queue, at = self.queue, self.decoded
        for i in range(self._first_pending, len(queue)):
            if queue[i][2] == PENDING:
                queue[i][2] = at
        self._first_pending = len(queue)
        self.decoded += text_len

    def end(self) -> None:
        """No more text will come: whatever is pending becomes zero-width at the end."""
        for entry in self.queue:
            if entry[2] == PENDING:
                entry[1], entry[2] = ZERO_WIDTH, self.decoded
        self._first_pending = len(self.queue)

    def cut(self, at: int) -> None:
        """Text from `at` on is gone (a stop string): anchors there collapse onto the cut."""
        for entry in self.queue:
            if entry[2] == PENDING or entry[2] >= at:
                entry[1], entry[2] = ZERO_WIDTH, at

    def release(self, start: int, text: str) -> list[tuple[int, int, int]]:
        """Attributions whose anchor lies in the released text [start, start + len(text))."""
        end = start + len(text)
        queue = self.queue
        n = 0
        for _tid, kind, anchor in queue:
            if anchor == PENDING or (anchor >= end if kind == VISIBLE else anchor > end):
                break
            n += 1
        if not n:
            return []
        out = []
        ascii_text = text.isascii()
        for tid, kind, anchor in queue[:n]:
            local = anchor - start
            out.append((tid, kind, local if ascii_text else len(text[:local].encode("utf-8"))))
        del queue[:n]
        self._first_pending = max(0, self._first_pending - n)
        return out
