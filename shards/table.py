"""A shard's rid -> request table: the only owner of its requests' state (no locks).

Turns each message from the egress into deltas. Requests are never evicted to make room
(SGLang issue #2812): past `max_requests` a new rid is refused with a terminal error, and
ended rids are remembered (bounded) so that late rows are ignored instead of reopening.
"""

from __future__ import annotations

from codecs import utf_8_decode
from itertools import chain, compress, repeat
from operator import add
from typing import Any

import msgspec

from sglang_tok.protocol import (
    Abort,
    Batch,
    ColumnsOut,
    Delta,
    Error,
    Family,
    Open,
    Result,
    Sink,
    Usage,
    terminal,
)
from sglang_tok.request import SENT_TAIL, Request, make_request, refusal
from sglang_tok.tokenizer import TokenizerInfo


class ShardCounters(msgspec.Struct, gc=False):
    rows: int = 0
    tokens: int = 0
    late_rows: int = 0
    ignored_opens: int = 0
    rejected: int = 0
    finished: int = 0


class RidTable:
    def __init__(self, info: TokenizerInfo, shard: int, max_requests: int = 65536,
                 ended_memory: int = 65536, max_stops: int = 64,
                 max_stop_len: int = 1024, max_tools_bytes: int = 1 << 20) -> None:
        self.info = info
        self.shard = shard
        self.max_requests = max_requests
        self.ended_memory = ended_memory
        self.max_stops = max_stops
        self.max_stop_len = max_stop_len
        self.max_tools_bytes = max_tools_bytes
        self.live: dict[str, Request] = {}
        self.ended: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first
        self.counters = ShardCounters()
        # rids this shard ended on its own (stop strings, refusals) since the last report,
        # so the egress stops counting them as live
        self.self_ended: list[str] = []
        # (rid, completion, reasoning) of every rid ended since the last Ack: the egress
        # keeps a shard's endings while their last delta may still be in its socket queue
        self.final_usage: list[tuple[str, int, int]] = []

    # ------------------------------------------------------------------ bookkeeping
    def _mark_ended(self, rid: str) -> None:
        ended = self.ended
        ended[rid] = None
        if len(ended) > self.ended_memory:
            del ended[next(iter(ended))]

    def _finish(self, rid: str, by_service: bool) -> None:
        req = self.live.pop(rid, None)
        if req is not None:
            self.final_usage.append((rid, req.completion, req.reasoning_tokens))
        self._mark_ended(rid)
        self.counters.finished += 1
        if by_service:
            self.self_ended.append(rid)

    def _open(self, rid: str, opts: Open | None, out: Sink) -> Request | None:
        if len(self.live) >= self.max_requests:
            self.counters.rejected += 1
            out.append(_terminal(rid, f"shard {self.shard} is at --max-requests "
                                 f"{self.max_requests} live requests"))
            self._finish(rid, True)
            return None
        req = self.live[rid] = make_request(rid, self.info, opts)
        return req

    # ------------------------------------------------------------------ messages
    def on_batch(self, batch: Batch, out: Sink,
                 owners: bytes | memoryview | None = None) -> None:
        """Decode the rows of a frame; with `owners`, only those whose byte is ours.

        Into a ColumnsOut, the hot rows only note their row and text; their columns are
        built after the loop at C speed, ahead of the other rows' deltas. That keeps each
        rid's order: a fast rid's rows are hot up to its last, which is not.
        """
        h = batch.header
        ids = batch.token_ids()
        vocab = self.info.vocab_size
        src = ids  # what the byte table is indexed with: ids, or ids with OOV -> vocab
        if ids and (min(ids) < 0 or max(ids) >= vocab):
            src = [i if 0 <= i < vocab else vocab for i in ids]
        safe = None if src is ids else src
        starts = batch.tokens.row_starts
        lp = _FlatReader.of(batch, "output_logprobs")
        top = _RaggedReader.of(batch, "output_top")
        tid_lp = _RaggedReader.of(batch, "output_token_ids")
        live, ended, counters = self.live, self.ended, self.counters
        finishes, prompts, cached, reasoning = (h.finish_reasons, h.prompt_tokens,
                                                h.cached_tokens, h.reasoning_tokens)
        columnar = isinstance(out, ColumnsOut)
        hot: list[int] = []
        hot_texts: list[str] = []
        sink: Sink = [] if columnar else out  # columnar: other rows' deltas follow hot ones
        append, delta_of, decode, tail_max = sink.append, Delta, utf_8_decode, SENT_TAIL
        hot_append, text_append = hot.append, hot_texts.append
        rids, lens = h.rids, h.tok_lens
        # per row: (row, rid, finish, first id, end of ids, carries logprobs), our rows
        # only, the columns picked at C speed
        has_extras = _extra_rows(batch, (lp, top, tid_lp))
        ends = starts[1:]
        if owners is None:
            rows, tokens = len(rids), len(ids)
            walk = zip(range(rows), rids, finishes, starts, ends, has_extras)
        else:  # our rows of a shared frame
            mask = list(map(self.shard.__eq__, owners))
            mine = list(compress(range(len(rids)), mask))
            rows, tokens = len(mine), sum(compress(lens, mask))
            walk = zip(mine, compress(rids, mask), compress(finishes, mask),
                       compress(starts, mask), compress(ends, mask),
                       compress(has_extras, mask))
        for i, rid, fin, a, b, xrow in walk:
            req = live.get(rid)
            if req is None:
                if rid in ended:
                    counters.late_rows += 1
                    continue
                req = self._open(rid, None, sink)
                if req is None:
                    continue
            if req.fast and fin is None:
                # hot path: ByteStream.push inlined, for a row that does not end its request
                s = req.stream
                table = s.table  # type: ignore[attr-defined]
                data = table[src[a]] if b - a == 1 else b"".join([table[x] for x in src[a:b]])
                if s.pending:  # type: ignore[attr-defined]
                    data = s.pending + data  # type: ignore[attr-defined]
                text, used = decode(data, "replace", False)
                s.pending = data[used:] if used != len(data) else b""  # type: ignore[attr-defined]
                if s.skip and text:  # type: ignore[attr-defined]
                    text = text[1:]
                    s.skip = 0  # type: ignore[attr-defined]
                req.completion += b - a
                if text:
                    t = req.tail + text
                    req.tail = t if len(t) <= tail_max else t[-tail_max:]
                if columnar:
                    hot_append(i)
                    text_append(text)
                elif xrow:
                    append(delta_of(rid, text, ids[a:b], lp.row(i) if lp else None,
                                    top.row(i) if top else None,
                                    tid_lp.row(i) if tid_lp else None))
                else:
                    append(delta_of(rid, text, ids[a:b]))
                continue
            delta = req.row(ids[a:b], fin, prompts[i], cached[i], reasoning[i],
                            lp.row(i) if lp else None, top.row(i) if top else None,
                            tid_lp.row(i) if tid_lp else None,
                            None if safe is None else safe[a:b])
            if delta is not None:
                append(delta)
                if delta.finish is not None:
                    self._finish(rid, fin is None)
        counters.rows += rows
        counters.tokens += tokens
        if columnar:
            assert isinstance(out, ColumnsOut) and isinstance(sink, list)
            if hot:
                _hot_columns(out, batch, ids, hot, hot_texts, (lp, top, tid_lp))
            for d in sink:
                out.append(d)

    def on_open(self, msg: Open, out: Sink) -> None:
        rid = msg.rid
        if rid in self.live:
            self.counters.ignored_opens += 1
            return
        self.ended.pop(rid, None)  # an OPEN is how a finished rid is reused
        if len(msg.stop) > self.max_stops or any(len(s) > self.max_stop_len for s in msg.stop):
            out.append(_terminal(rid, f"stop strings exceed --max-stops {self.max_stops} or "
                                 f"--max-stop-length {self.max_stop_len}"))
            self._finish(rid, True)
            return
        if msg.tools and len(msgspec.json.encode(msg.tools)) > self.max_tools_bytes:
            out.append(_terminal(rid, f"tools exceed --max-tools-bytes {self.max_tools_bytes}"))
            self._finish(rid, True)
            return
        why = refusal(msg, self.info)  # a parser option, or text wanted without a tokenizer
        if why is not None:
            out.append(_terminal(rid, why))
            self._finish(rid, True)
            return
        self._open(rid, msg, out)

    def on_error(self, msg: Error, out: Sink) -> None:
        self._end(msg.rid, msg.message, out)

    def on_abort(self, msg: Abort, out: Sink) -> None:
        for rid in msg.rids:
            self._end(rid, None, out)

    def _end(self, rid: str, error: str | None, out: Sink) -> None:
        req = self.live.get(rid)
        if req is not None:
            out.append(req.end({"type": "abort"}, error))
        elif rid in self.ended:
            self.counters.late_rows += 1
            return
        else:
            out.append(_terminal(rid, error))
        self._finish(rid, False)

    def on_result(self, msg: Result, out: Sink) -> None:
        out.append(Delta(msg.rid, result=msg.payload))

    def on_drop(self, rids: list[str], message: str, out: Sink) -> None:
        """The egress dropped a frame naming these rids: end each with a terminal error.

        The error leaves from this shard, after the rid's earlier deltas, so a frontend
        never sees a delta after a request's last one (protocol section 1).
        """
        for rid in rids:
            self._end(rid, message, out)

    def fail_all(self, message: str, out: Sink) -> None:
        for rid in list(self.live):
            out.append(self.live[rid].end({"type": "abort"}, message))
            self._finish(rid, True)


def _extra_rows(batch: Batch, readers: tuple[Any, ...]) -> list[Any] | repeat[bool]:
    """Per row, whether it carries any output logprobs (truthy), from the header's
    length columns; every row is plain in a frame without them."""
    h = batch.header
    cols = [getattr(h, col) for reader, col in zip(readers, _EXTRA_COLUMNS)
            if reader is not None]
    if not cols:
        return repeat(False)
    flags = cols[0]
    for col in cols[1:]:  # lengths are >= 0: a sum is nonzero where any is
        flags = list(map(add, flags, col))
    return flags


def _hot_columns(out: ColumnsOut, batch: Batch, ids: list[int], hot: list[int],
                 texts: list[str], readers: tuple[Any, Any, Any]) -> None:
    """Append the hot rows to the dense columns with whole-column C operations; only
    rows that carry logprobs (picked by their header lengths) cost a Python step."""
    base = len(out.rids)
    h, starts = batch.header, batch.tokens.row_starts
    out.texts += texts
    if len(hot) == len(h.rids):  # every row of the frame, in order: whole columns
        out.rids += h.rids
        out.id_lens += h.tok_lens
        out.ids += ids
    else:
        out.rids += map(h.rids.__getitem__, hot)
        lens = list(map(h.tok_lens.__getitem__, hot))
        out.id_lens += lens
        a_s = list(map(starts.__getitem__, hot))
        if lens.count(1) == len(lens):  # one id per row: no slices at all
            out.ids += map(ids.__getitem__, a_s)
        else:
            b_s = map(add, a_s, lens)
            out.ids += chain.from_iterable(map(ids.__getitem__, map(slice, a_s, b_s)))
    for name, reader, col in zip(("logprobs", "top_logprobs", "token_ids_logprobs"), readers,
                                 _EXTRA_COLUMNS):
        if reader is None:
            continue
        have = getattr(h, col)
        for j in compress(range(len(hot)), map(have.__getitem__, hot)):
            val = reader.row(hot[j])
            if val is not None:
                out.add_sparse(name, base + j, val)


# the header column whose nonzero entries mark a row carrying that family
_EXTRA_COLUMNS = ("output_token_logprobs_lens", "output_top_logprobs_reqlens",
                  "output_token_ids_logprobs_reqlens")


def _terminal(rid: str, error: str | None) -> Delta:
    return terminal(rid, error, Usage(0, 0, 0, 0, 0))


class _FlatReader:
    """Row access to a flat (value, id) family: [[value, id], ...] per row."""

    __slots__ = ("vals", "ids", "starts")

    def __init__(self, batch: Batch, fam: Family) -> None:
        self.vals, self.ids = batch.flat_pairs(fam)
        self.starts = fam.values.row_starts

    @classmethod
    def of(cls, batch: Batch, name: str) -> _FlatReader | None:
        fam = batch.family(name)
        return None if fam is None else cls(batch, fam)

    def row(self, i: int) -> list[Any] | None:
        a, b = self.starts[i], self.starts[i + 1]
        return list(zip(self.vals[a:b], self.ids[a:b])) if a != b else None


class _RaggedReader:
    """Row access to a ragged family: per position [[id, value], ...] or None."""

    __slots__ = ("vals", "ids", "starts", "poslens", "pos_starts")

    def __init__(self, batch: Batch, fam: Family) -> None:
        self.vals, self.ids = batch.flat_pairs(fam)
        self.starts = fam.values.row_starts
        self.poslens, self.pos_starts = fam.poslens, fam.pos_starts

    @classmethod
    def of(cls, batch: Batch, name: str) -> _RaggedReader | None:
        fam = batch.family(name)
        return None if fam is None else cls(batch, fam)

    def row(self, i: int) -> list[Any] | None:
        j = self.starts[i]
        p0, p1 = self.pos_starts[i], self.pos_starts[i + 1]
        if p0 == p1:
            return None
        out: list[Any] = []
        vals, ids, poslens = self.vals, self.ids, self.poslens
        for p in range(p0, p1):
            k = poslens[p]
            out.append(list(zip(ids[j:j + k], vals[j:j + k])) if k else None)
            j += k
        return out
