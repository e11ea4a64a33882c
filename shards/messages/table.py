"""A shard's requests: the only owner of their state (no locks), by slot and by rid.

Rows arrive as slots (ring/link.py, ARRAYS). Every message takes one path: its new rids are
bound, its rows triaged once (`RowTriage`: plain rows, the last rows that end with them,
per-row rows, late rows), the plain ones decoded by the tokenizer family's decoder
(shards/decoders.py, or injected: tests choose the implementation), the last ones ended by
shards/ending/rules.py's rules, and all written by one sink writer (`write_rows`). A
request that needs more than the array path knows takes the per-row path: the table keeps
its `Request` by slot, beside the slots' arrays (shards/decoding/slots.py), and hands it the
per-row decoder; shards/messages/paths.py decides which path, once (its rule injected too).
Control messages (OPEN, ERROR, ABORT, DROP) name rids, so rids map to slots too. Requests
are never evicted to make room (SGLang issue #2812): past `max_requests` a new rid is
refused with a terminal error, and ended rids are remembered (bounded) so that late rows
are ignored instead of reopening."""

from __future__ import annotations

from collections import Counter
from itertools import chain
from operator import itemgetter
from typing import Any, cast

import msgspec
import numpy as np
import numpy.typing as npt

from ring.link import Arrays
from sglang_tok.finish import ABORT, stop_string
from sglang_tok.protocols.model.control import Abort, Error, Open, Result
from sglang_tok.protocols.model.deltas import Delta, Usage, terminal
from sglang_tok.protocols.model.output import Sink
from sglang_tok.ragged import starts_of
from sglang_tok.tokenizer import TokenizerInfo
from shards.messages.request import Request, make_request, refusal

from ..decoders import Decoders, decoders_for
from ..decoding.interface import Decoded, PlainRows, in_vocab
from ..decoding.slots import KIND, PLAIN, Slots, SlotStart
from ..ending.assembly import LastRow, end_rows
from ..ending.rules import Ends, blank_stop_tokens, ends_of
from ..ending.sent import SentLog
from .paths import ARRAY, PathRule, row_reason
from .rows_out import Families, attributions, continuous_usage, logprob_texts, write_rows
from .triage import RowTriage, gather, per_row_rows, record, split_ends

I64 = npt.NDArray[np.int64]


class ShardCounters(msgspec.Struct, gc=False):
    rows: int = 0
    tokens: int = 0
    late_rows: int = 0
    ignored_opens: int = 0
    rejected: int = 0
    finished: int = 0


class _Opened:
    """An OPENed rid before its first row: its options, and what its path needs then."""

    __slots__ = ("opts", "reason", "req", "start")

    def __init__(self, opts: Open, reason: str | None, req: Request | None,
                 start: SlotStart | None) -> None:
        self.opts, self.reason, self.req, self.start = opts, reason, req, start


class RidTable:
    def __init__(self, info: TokenizerInfo, shard: int, max_requests: int = 65536,
                 ended_memory: int = 65536, max_stops: int = 64,
                 max_stop_len: int = 1024, max_tools_bytes: int = 1 << 20,
                 decoders: Decoders | None = None, path_rule: PathRule = row_reason) -> None:
        """`decoders`: how plain rows and per-row requests are decoded (None: the
        tokenizer's own, `decoders_for`); `path_rule`: which path a request takes
        (shards/messages/paths.py)."""
        self.info = info
        self.shard = shard
        self.max_requests = max_requests
        self.ended_memory = ended_memory
        self.max_stops = max_stops
        self.max_stop_len = max_stop_len
        self.max_tools_bytes = max_tools_bytes
        self.state = Slots()
        # the per-row requests, by slot (the slots' arrays hold numbers)
        self.requests: dict[int, Request] = {}
        # the array path's decoder (None: every request per row), and the per-row path's:
        # the array path's, so that a request keeps one, or (without one: WordPiece, no
        # text) the tokenizer family's
        self.decoder, self.rows = decoders_for(info) if decoders is None else decoders
        self.path_rule = path_rule
        self._fresh = self.decoder.start(_DEFAULT_OPEN) if self.decoder is not None else None
        self.by_rid: dict[str, int] = {}  # rids with a slot
        self.opened: dict[str, _Opened] = {}  # OPENed, no row yet
        self.ended: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first
        self.opts: dict[int, Open] = {}  # plain slots opened with options (else defaults)
        self.counters = ShardCounters()
        self.paths: Counter[str] = Counter()  # requests per path: "array" or the reason
        # rids this shard ended on its own (stop strings, refusals) since the last report,
        # so the egress stops counting them as live
        self.self_ended: list[str] = []
        # (rid, completion, reasoning) of every rid ended since the last Ack: the egress
        # keeps a shard's endings while their last delta may still be in its socket queue
        self.final_usage: list[tuple[str, int, int]] = []
        # what the plain rows sent, for a scheduler-matched stop string at a request's end
        self.sent = SentLog()

    @property
    def live(self) -> dict[str, None]:
        """Every live rid (cold path: metrics, tests)."""
        return dict.fromkeys(chain(self.opened, self.by_rid))

    # ------------------------------------------------------------------ bookkeeping
    def _mark_ended(self, rid: str) -> None:
        ended = self.ended
        ended[rid] = None
        if len(ended) > self.ended_memory:
            del ended[next(iter(ended))]

    def _finish(self, rid: str, by_service: bool, completion: int = 0,
                reasoning: int = 0) -> None:
        slot = self.by_rid.pop(rid, None)
        opened = self.opened.pop(rid, None)
        if slot is not None or opened is not None:
            self.final_usage.append((rid, completion, reasoning))
        if slot is not None:
            self.state.free(slot)
            self.opts.pop(slot, None)
            self.requests.pop(slot, None)
        self._mark_ended(rid)
        self.counters.finished += 1
        if by_service:
            self.self_ended.append(rid)

    def _refuse(self, rid: str, why: str, out: Sink) -> None:
        out.append(_terminal(rid, why))
        self._finish(rid, True)

    def _at_capacity(self, rid: str, out: Sink) -> bool:
        if len(self.by_rid) + len(self.opened) < self.max_requests:
            return False
        self.counters.rejected += 1
        self._refuse(rid, f"shard {self.shard} is at --max-requests {self.max_requests} "
                          "live requests", out)
        return True

    # ------------------------------------------------------------------ slots
    def _bind(self, slot: int, rid: str, prompt: int, cached: int, since: int,
              out: Sink) -> None:
        """A rid's first row (the shard's row `since`): it takes its slot on the path chosen
        for it."""
        old = self.state.rids[slot] if slot < self.state.capacity else None
        if old is not None:  # the egress reused a slot we still hold: end the old rid
            self._end(old, "internal detokenizer error: slot reused", out)
        opened = self.opened.pop(rid, None)
        if opened is None:
            if rid in self.ended or rid in self.by_rid:
                return  # late rows of an ended rid (or a duplicate): the slot stays free
            if self._at_capacity(rid, out):
                return
            opened = self._prepare(rid, None)
        self.paths[opened.reason or ARRAY] += 1
        self.by_rid[rid] = slot
        if opened.req is not None:
            req = opened.req
            req.prompt_tokens, req.cached_tokens = prompt, cached
            req.take_slot(slot)
            self.requests[slot] = req
            return
        assert opened.start is not None
        self.state.bind_plain(slot, rid, opened.start, since, prompt, cached,
                              opened.opts.logprob_text, opened.opts.continuous_usage,
                              opened.opts.attribution)
        if opened.opts is not _DEFAULT_OPEN:
            self.opts[slot] = opened.opts

    def _prepare(self, rid: str, opts: Open | None) -> _Opened:
        reason = self.path_rule(opts, self.info, self.decoder is not None)
        if reason is not None:
            return _Opened(opts or _DEFAULT_OPEN, reason,
                           make_request(rid, self.info, opts, self.rows, self.state, None), None)
        assert self.decoder is not None
        if opts is None:
            return _Opened(_DEFAULT_OPEN, None, None, self._fresh)
        return _Opened(opts, None, None, self.decoder.start(opts))

    # ------------------------------------------------------------------ messages
    def _take(self, msg: Arrays, slots: Any, out: Sink) -> Ends:
        """What every message path does first: bind the rids whose first row this is,
        count the rows and ids, and read the last rows."""
        sparse = msg.sparse
        base = self.counters.rows  # the shard's number of the message's first row
        for row, rid, prompt, cached in sparse.new:
            self._bind(int(slots[row]), rid, prompt, cached, base + row, out)
        self.counters.rows += len(msg.slots)
        self.counters.tokens += len(msg.ids)
        return ends_of(sparse.ends)

    def on_arrays(self, msg: Arrays, out: Sink) -> None:
        """One ARRAYS message: bind new rids, triage its rows, decode the plain ones with the
        tokenizer family's decoder, the others per row."""
        triage = self._triage(msg, out)
        fams = Families(msg.sparse.families, triage.n)
        done = 0
        if triage.plain is not None:
            self._plain_rows(msg, triage, triage.plain, fams, out)
            done = len(triage.plain.rows)
        if triage.per_row:
            done += self._row_path(triage, msg, fams, out)
        self.counters.late_rows += triage.n - done

    def _triage(self, msg: Arrays, out: Sink) -> RowTriage:
        """Bind the message's new rids, then sort its rows by what each needs."""
        sparse, state = msg.sparse, self.state
        slots = msg.slots.astype(np.int64)
        n = len(slots)
        base = self.counters.rows
        ends = self._take(msg, slots, out)
        id_starts = starts_of(np.frombuffer(sparse.counts, np.uint32).astype(np.int64)) \
            if sparse.counts else None
        if not n:
            return RowTriage(0, base, slots, id_starts, ends, None, [], {}, [])
        try:
            meta = state.meta[slots]
        except IndexError:  # late rows of a rid never bound, on a slot past the arrays
            state.grow(int(slots.max()) + 1)
            meta = state.meta[slots]
        kinds = meta[:, KIND]
        distinct = state.marks.distinct(slots, state.capacity)
        plain = kinds == PLAIN
        quick: list[int] = []
        per_row: list[int] = []
        late = None
        if ends:
            quick, late = split_ends(ends, slots, kinds, plain, distinct)
        rows = plain.nonzero()[0]
        if len(rows) < n:  # rows of per-row requests, other last rows, late rows
            per_row = per_row_rows(kinds, ends, quick, late)
        stops: dict[int, int] = {}  # quick last rows whose stop token is left out: its id
        got = None
        if len(rows):
            assert self.decoder is not None  # a plain slot exists only with a decoder
            ids = msg.ids
            if quick:
                ids = blank_stop_tokens(quick, ends, ids, np.arange(n + 1) if id_starts is None
                                        else id_starts, lambda r: self._no_stop_trim(
                                            int(slots[r])), self.info.vocab_size, stops)
            got = gather(rows, slots, meta, in_vocab(ids, self.info.vocab_size), msg.ids,
                          id_starts, distinct)
        return RowTriage(n, base, slots, id_starts, ends, got, quick, stops, per_row)

    def _plain_rows(self, msg: Arrays, triage: RowTriage, got: PlainRows, fams: Families,
                    out: Sink) -> None:
        """Decode the message's plain rows, end its quick last rows, write."""
        assert self.decoder is not None
        state, quick = self.state, triage.quick
        decoded = self.decoder.decode(state, got)
        record(state, got)
        self.sent.add(triage.base, got.rows, got.slots, decoded)
        end_at: list[int] = []  # where the last rows are among the plain rows
        ended: list[LastRow] = []
        if quick:
            end_at = quick if got.every else np.searchsorted(got.rows, quick).tolist()
            ended = self._last_rows(triage, end_at, got.slots[end_at], quick)
            end_rows(self.decoder, state, decoded, ended)
        # a plain slot always holds its rid (Slots.bind_plain)
        rids = cast(list[str], state.rid_col.take(got.slots).tolist())
        base = len(out)
        write_rows(out, rids, decoded, got, msg, fams)
        if decoded.attrs is not None:
            attributions(out, base, decoded.attrs)
        self._plain_extras(out, base, got.rows, got.slots, fams, msg.sparse.reasoning, end_at,
                           ended, rids)

    def _no_stop_trim(self, slot: int) -> bool:
        opts = self.opts.get(slot)  # a plain slot opened with defaults has no entry
        return opts is not None and opts.no_stop_trim

    def _last_rows(self, triage: RowTriage, at: list[int], slots: I64, rows: list[int]
                   ) -> list[LastRow]:
        """The message's last rows of plain requests (at[k] among its plain rows), for the
        end rules: each with what its request sent before (`SentLog`, read only for a
        matched stop string), its final usage's numbers (its completion after the row)."""
        state, ends, stops = self.state, triage.ends, triage.stops
        out = []
        for j, slot, row, done in zip(at, slots.tolist(), rows,
                                      state.completion[slots].tolist()):
            fin, prompt, cached, reasoning = ends[row]
            older = self.sent.older(slot, int(state.since[slot]), triage.base + row) \
                if stop_string(fin) else ()
            opts = self.opts.get(slot)  # a plain slot opened with defaults has no entry
            kept = opts is not None and opts.no_stop_trim
            through = opts is not None and opts.no_stop_trim and opts.trim_after_stop is True
            out.append(LastRow(j, slot, fin, (prompt, done, cached, reasoning), stops.get(row),
                               kept, older=older, through=through))
        return out

    def _plain_extras(self, out: Sink, base: int, plain_rows: I64, plain_slots: I64,
                      fams: Families, reasoning: bytes, end_at: list[int],
                      ended: list[LastRow], rids: list[str]) -> None:
        """What a message's plain rows (output rows base + j) carry beside text and ids:
        their logprobs' token texts, continuous usage, and the last rows' (`ended`, at
        `end_at` among them) finish and final usage."""
        state = self.state
        if fams.families:  # the rows whose request wants its logprobs' texts
            wants = state.lp_text[plain_slots].nonzero()[0]
            if len(wants):
                logprob_texts(out, base, wants.tolist(), plain_rows[wants].tolist(), fams,
                               self.info)
        if state.usage_live:
            asked_flags = state.cont_usage[plain_slots].astype(bool)
            asked_flags[end_at] = False  # a last row carries its final usage below
            asked = asked_flags.nonzero()[0]
            if len(asked):
                continuous_usage(out, base, asked.tolist(), plain_rows[asked].tolist(),
                                  plain_slots[asked].tolist(), state, reasoning)
        if ended:
            self._array_ends(out, base, ended, rids)

    def _array_ends(self, out: Sink, base: int, ended: list[LastRow], rids: list[str]) -> None:
        """The last rows' finish and usage (as `ending.end_rows` set them), then their
        requests end."""
        for end in ended:
            j = end.j
            out.put(base + j, "finish", end.finish)
            out.put(base + j, "usage", end.usage)
            _, done, _, reasoning = end.numbers
            self._finish(rids[j], False, done, reasoning)
        if self.state.usage_live:  # continuous usage rows came first
            out.settle("usage")

    def _row_path(self, triage: RowTriage, msg: Arrays, fams: Families, out: Sink) -> int:
        """Rows of per-row requests and last rows, in row order; returns how many ran."""
        reasoning = np.frombuffer(msg.sparse.reasoning, np.uint32).tolist() \
            if msg.sparse.reasoning else None
        ids = msg.ids.tolist()
        st = list(range(triage.n + 1)) if triage.id_starts is None else triage.id_starts.tolist()
        request = self.requests.get
        carrying = fams.get().carrying.tolist() if fams.families else None
        ends, slots = triage.ends, triage.slots.tolist()
        ran = 0
        for row in triage.per_row:
            slot = slots[row]
            req = request(slot)
            if req is None:
                continue  # ended earlier in this message (a stop string), or never bound
            end = ends.get(row)
            if end is None:
                fin, prompt, cached = None, req.prompt_tokens, req.cached_tokens
                why = req.reasoning_tokens if reasoning is None else reasoning[row]
            else:
                fin, prompt, cached, why = end
            lp = top = tid = None
            if carrying is not None and carrying[row]:
                lp, top, tid = fams.extras(row)
            a, b = st[row], st[row + 1]
            delta = req.row(ids[a:b], fin, prompt, cached, why, lp, top, tid)
            ran += 1
            if delta is not None:
                out.append(delta)
                if delta.finish is not None:
                    self._finish(req.rid, fin is None, req.completion, req.reasoning_tokens)
        return ran

    # ------------------------------------------------------------------ control
    def on_open(self, msg: Open, out: Sink) -> None:
        rid = msg.rid
        if rid in self.by_rid or rid in self.opened:
            self.counters.ignored_opens += 1
            return
        self.ended.pop(rid, None)  # an OPEN is how a finished rid is reused
        if len(msg.stop) > self.max_stops or any(len(s) > self.max_stop_len for s in msg.stop):
            return self._refuse(rid, f"stop strings exceed --max-stops {self.max_stops} or "
                                     f"--max-stop-length {self.max_stop_len}", out)
        if msg.tools and len(msgspec.json.encode(msg.tools)) > self.max_tools_bytes:
            return self._refuse(rid, f"tools exceed --max-tools-bytes {self.max_tools_bytes}",
                                out)
        why = refusal(msg, self.info)  # a parser option, or text wanted without a tokenizer
        if why is not None:
            return self._refuse(rid, why, out)
        if self._at_capacity(rid, out):
            return
        self.opened[rid] = self._prepare(rid, msg)

    def on_error(self, msg: Error, out: Sink) -> None:
        self._end(msg.rid, msg.message, out)

    def on_abort(self, msg: Abort, out: Sink) -> None:
        for rid in msg.rids:
            self._end(rid, None, out)

    def _end(self, rid: str, error: str | None, out: Sink) -> None:
        slot = self.by_rid.get(rid)
        opened = self.opened.get(rid)
        if slot is not None:
            req = self.requests.get(slot)
            if req is None:  # a plain request: the end rules on its slot, as its last row
                return self._end_plain(slot, rid, error, out)
        elif opened is not None:
            req = (opened.req or make_request(rid, self.info, opened.opts, self.rows,
                                              self.state, None)).alone()
        elif rid in self.ended:
            self.counters.late_rows += 1
            return
        else:
            out.append(_terminal(rid, error))
            self._finish(rid, False)
            return
        out.append(req.end(ABORT, error))
        self._finish(rid, False, req.completion, req.reasoning_tokens)

    def _end_plain(self, slot: int, rid: str, error: str | None, out: Sink) -> None:
        """A plain request's ERROR or ABORT: an empty last row through the end rules."""
        state = self.state
        assert self.decoder is not None  # a plain slot exists only with a decoder
        done = int(state.completion[slot])
        end = LastRow(0, slot, ABORT,
                      (int(state.prompt[slot]), done, int(state.cached[slot]), 0), control=True)
        decoded = Decoded([""], attrs=[[]] if state.attr[slot] else None)
        end_rows(self.decoder, state, decoded, [end])
        delta = Delta(rid, decoded.text_of(0), [])
        if decoded.attrs is not None:
            delta.attributions = decoded.attrs[0]
        delta.usage, delta.finish, delta.error = end.usage, end.finish, error
        out.append(delta)
        self._finish(rid, False, done, 0)

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
        """Every live rid ends (a new egress knows none of them); the slots start afresh."""
        for rid in list(chain(self.by_rid, self.opened)):
            self._end(rid, message, out)
            self.self_ended.append(rid)
        self.state = Slots()
        self.requests.clear()
        self.sent = SentLog()
        self.opts.clear()


_DEFAULT_OPEN = Open("")
_first = itemgetter(0)


def _terminal(rid: str, error: str | None) -> Delta:
    return terminal(rid, error, Usage(0, 0, 0, 0, 0))
