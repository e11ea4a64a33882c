"""Which input frame each output delta answers: frame latency that measures latency.

Used by `scripts/load/replay.py` and its tests; it reads the frames a scheduler sent and the
messages the service sent back (DELTAS or COLUMNS), and needs nothing else.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sglang_tok.protocols.model import batch, control, errors, tags
from sglang_tok.protocols.model.dispatch import rids_of


class _LeanDelta(msgspec.Struct, gc=False):
    """The two keys the latency map needs; msgspec skips the rest of each map unbuilt."""

    rid: str
    finish: Any = None


class _LeanDeltas(msgspec.Struct, gc=False):
    shard: int
    seq: int
    deltas: list[_LeanDelta]


class _LeanColumns(msgspec.Struct, array_like=True, gc=False):
    """A COLUMNS message (protocol 5.1, `--output-format columnar`): rids and the sparse
    finish column; texts and ids stay raw bytes and later columns are skipped."""

    shard: int
    seq: int
    rids: list[str]
    texts: msgspec.Raw
    id_lens: msgspec.Raw
    ids: msgspec.Raw
    finish: list[tuple[int, Any]] = []


class _LeanPacked(msgspec.Struct, array_like=True, gc=False):
    """A PACKED message (protocol 5.4): as COLUMNS, one more raw buffer before finish."""

    shard: int
    seq: int
    rids: list[str]
    text: msgspec.Raw
    text_lens: msgspec.Raw
    id_lens: msgspec.Raw
    ids: msgspec.Raw
    finish: list[tuple[int, Any]] = []


_LEAN = msgspec.msgpack.Decoder(_LeanDeltas)
_LEAN_COLUMNS = msgspec.msgpack.Decoder(_LeanColumns)
_LEAN_PACKED = msgspec.msgpack.Decoder(_LeanPacked)


class DeltaMap:
    """Which input frame each delta answers, so that latency is measured per frame.

    Protocol rule 1 says which rows produce a delta of their own: every accepted row of a
    streaming request, only the last row of a `stream: false` request; rule 6 says rows
    after a request's end produce none. So a rid's j-th delta answers its j-th producing
    row, read from the trace before the run. A service stop string (or a terminal error)
    ends a request early: its last delta arrives with a finish while producing rows remain,
    and those rows are struck off when it arrives. ABORT and ERROR deltas hold their place
    in a rid's sequence but answer a control frame, which is not a frame-latency sample.

    A frame's latency is the time from its send to the arrival of the last delta that its
    rows produced; a frame is in flight from its send until every row of it that produces a
    delta has one (or is struck off), which is what `--window` counts.
    """

    def __init__(self, frames: list[bytes]) -> None:
        n = len(frames)
        self.expect: dict[str, list[int]] = {}
        self.first_row: dict[str, int] = {}
        self.pending = [0] * n
        self.sent = [0.0] * n
        self.is_sent = bytearray(n)
        self.last = [0.0] * n
        self.got: dict[str, int] = {}
        self.arrivals: dict[str, list[float]] = {}
        self.inflight = 0
        self.per_shard: dict[int, int] = {}
        self._build(frames)

    def _build(self, frames: list[bytes]) -> None:
        stream: dict[str, bool] = {}
        live: dict[str, bool] = {}
        ended: set[str] = set()
        for i, frame in enumerate(frames):
            tag = frame[0] if frame else -1
            try:
                if tag == tags.TAG_BATCH:
                    b = batch.decode_batch(frame)
                    for rid, fin in zip(b.rids, b.header.finish_reasons):
                        if rid in ended:
                            continue
                        if rid not in live:
                            live[rid] = stream.pop(rid, True)
                            self.first_row[rid] = i
                        if live[rid] or fin is not None:
                            self._expect(rid, i)
                        if fin is not None:
                            del live[rid]
                            ended.add(rid)
                    continue
                msg = control.decode_control(frame)
            except errors.FrameError as exc:
                for rid in exc.rids if tag == tags.TAG_BATCH else []:
                    if rid not in ended:  # its terminal error delta answers this frame
                        self._expect(rid, i)
                        live.pop(rid, None)
                        ended.add(rid)
                continue
            if isinstance(msg, control.Open):
                if msg.rid not in live:
                    stream[msg.rid] = msg.stream
            elif isinstance(msg, (control.Abort, control.Error)):
                for rid in rids_of(msg):
                    if rid in live:
                        self.expect.setdefault(rid, []).append(-1)
                        del live[rid]
                        ended.add(rid)

    def _expect(self, rid: str, frame: int) -> None:
        self.expect.setdefault(rid, []).append(frame)
        self.pending[frame] += 1

    def mark_sent(self, frame: int, t: float) -> None:
        self.sent[frame] = t
        self.is_sent[frame] = 1
        if self.pending[frame]:
            self.inflight += 1

    def feed(self, t: float, raw: bytes) -> None:
        """Account one output message that arrived at time t (PONGs are ignored)."""
        if raw[0] == tags.TAG_DELTAS:
            msg = _LEAN.decode(memoryview(raw)[1:])
            shard, n = msg.shard, len(msg.deltas)
            rows: Any = ((d.rid, d.finish) for d in msg.deltas)
        elif raw[0] in (tags.TAG_COLUMNS, tags.TAG_PACKED):
            dec = _LEAN_COLUMNS if raw[0] == tags.TAG_COLUMNS else _LEAN_PACKED
            cols = dec.decode(memoryview(raw)[1:])
            shard, n = cols.shard, len(cols.rids)
            ends = dict(cols.finish)
            rows = ((rid, ends.get(r)) for r, rid in enumerate(cols.rids))
        else:
            return
        self.per_shard[shard] = self.per_shard.get(shard, 0) + n
        got, expect, arrivals = self.got, self.expect, self.arrivals
        for rid, finish in rows:
            j = got.get(rid, 0)
            got[rid] = j + 1
            times = arrivals.get(rid)
            if times is None:
                arrivals[rid] = [t]
            else:
                times.append(t)
            exp = expect.get(rid)
            if exp is None or j >= len(exp):
                continue
            f = exp[j]
            if f >= 0:
                self.last[f] = t
                self._answered(f)
            if finish is not None and j + 1 < len(exp):
                for f in exp[j + 1:]:
                    if f >= 0:
                        self._answered(f)
                del exp[j + 1:]

    def _answered(self, f: int) -> None:
        self.pending[f] -= 1
        if not self.pending[f] and self.is_sent[f]:
            self.inflight -= 1

    def frame_latencies(self, t0: float) -> list[tuple[float, float]]:
        """(send time since t0, latency) of every frame whose rows produced a delta."""
        return [(self.sent[i] - t0, self.last[i] - self.sent[i])
                for i in range(len(self.last)) if self.last[i] and self.is_sent[i]]

    def first_delta(self, t0: float) -> list[tuple[float, float]]:
        """(first row's send since t0, time to first delta) of every request whose first
        row produces a delta; a `stream: false` request's first delta is its last."""
        out = []
        for rid, fr in self.first_row.items():
            exp, times = self.expect.get(rid), self.arrivals.get(rid)
            if exp and times and exp[0] == fr and self.is_sent[fr]:
                out.append((self.sent[fr] - t0, times[0] - self.sent[fr]))
        return out

    def gaps(self) -> list[float]:
        """Inter-delta gaps of every request whose every row produces a delta."""
        out: list[float] = []
        for rid, times in self.arrivals.items():
            exp = self.expect.get(rid)
            if exp and exp[0] == self.first_row.get(rid) and len(times) > 1:
                out.extend(b - a for a, b in zip(times, times[1:]))
        return out
