"""A shard's requests: the only owner of their state (no locks), by slot and by rid.

Rows arrive as slots (ring/link.py, ARRAYS). A plain request's rows go through the array
path (shards/plain.py); a request that needs more keeps a `Request` and takes the per-row
path; shards/paths.py decides which, once. Control messages (OPEN, ERROR, ABORT, DROP)
name rids, so rids map to slots too. Requests are never evicted to make room (SGLang issue
#2812): past `max_requests` a new rid is refused with a terminal error, and ended rids are
remembered (bounded) so that late rows are ignored instead of reopening.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any, NamedTuple, cast

import msgspec
import numpy as np
import numpy.typing as npt
from sglang_tok.ring.link import Arrays
from sglang_tok.shards.request import Request, logprob_texts, make_request, refusal

from sglang_tok.logprob_rows import FIELDS, RowFamilies, shift
from sglang_tok.protocol import (
    Abort,
    ColumnsOut,
    Delta,
    Error,
    Open,
    PackedOut,
    Result,
    Sink,
    Usage,
    terminal,
)
from sglang_tok.ragged import ragged_index, starts_of
from sglang_tok.tokenizer import TokenizerInfo

from .attributed import Attribution, carry_into
from .ending import (
    Ends,
    blank_stop_tokens,
    end_attributions,
    ends_of,
    flush_held,
    stop_string,
    trims_stop_token,
    usage,
)
from .mapped import MAPPED_MIN_ROWS, decode_attributed, decode_mapped
from .paths import ARRAY, row_reason
from .plain import ARRAY_MIN_ROWS, PlainDecoder, PlainTexts
from .plain_fallback import FallbackPlainDecoder
from .slots import ATTR, CACHED, COMPLETION, CONT_USAGE, KIND, LP_TEXT, PLAIN, PROMPT, ROW, Slots
from .small import decode_small

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
                 start: tuple[bytes, int, bool] | None) -> None:
        self.opts, self.reason, self.req, self.start = opts, reason, req, start


class RidTable:
    def __init__(self, info: TokenizerInfo, shard: int, max_requests: int = 65536,
                 ended_memory: int = 65536, max_stops: int = 64,
                 max_stop_len: int = 1024, max_tools_bytes: int = 1 << 20,
                 array_min_rows: int | None = None, mapped: bool = True) -> None:
        self.info = info
        self.shard = shard
        self.max_requests = max_requests
        self.ended_memory = ended_memory
        self.max_stops = max_stops
        self.max_stop_len = max_stop_len
        self.max_tools_bytes = max_tools_bytes
        self.state = Slots()
        self.small_rows = ARRAY_MIN_ROWS if array_min_rows is None else array_min_rows
        # messages of one id per row and at least `mapped_rows` rows take the id-lookup path
        # (shards/mapped.py); False: the loop or the general array code, by size (the tests
        # hold each path to the others)
        self.mapped = mapped
        self.mapped_rows = min(MAPPED_MIN_ROWS, self.small_rows)
        self.plain = plain_decoder(info, self.small_rows)
        self._fresh = self.plain.start(_DEFAULT_OPEN) if self.plain is not None else None
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
    def _bind(self, slot: int, rid: str, prompt: int, cached: int, out: Sink) -> None:
        """A rid's first row: it takes its slot on the path chosen for it."""
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
            self.state.bind_row(slot, req)
            return
        assert opened.start is not None
        self.state.bind_plain(slot, rid, opened.opts.skip_special_tokens, opened.start, prompt,
                              cached, opened.opts.logprob_text, opened.opts.continuous_usage,
                              opened.opts.attribution)
        if opened.opts is not _DEFAULT_OPEN:
            self.opts[slot] = opened.opts

    def _prepare(self, rid: str, opts: Open | None) -> _Opened:
        reason = row_reason(opts, self.info, self.plain is not None)
        if reason is not None:
            return _Opened(opts or _DEFAULT_OPEN, reason, make_request(rid, self.info, opts),
                           None)
        assert self.plain is not None
        if opts is None:
            return _Opened(_DEFAULT_OPEN, None, None, self._fresh)
        return _Opened(opts, None, None, self.plain.start(opts))

    def _as_request(self, slot: int) -> Request:
        """The slot's request as a `Request` (a plain one is moved into one first)."""
        req = self.state.objs[slot]
        if req is not None:
            return req
        rid = self.state.rids[slot]
        assert rid is not None
        opts = self.opts.get(slot)
        opts = Open(rid) if opts is None else msgspec.structs.replace(opts, prompt_ids=[])
        assert self.plain is not None
        req = Request(rid, self.info, opts)
        if req.attr is not None:  # the ids still pending attribution go with it
            carry_into(req.attr, self.state.carry.pop(slot, None))
        return self.state.to_request(slot, req, self.plain.stream_of(self.state, slot),
                                     self.plain.sent_tail(self.state, slot))

    # ------------------------------------------------------------------ messages
    def _take(self, msg: Arrays, slots: Any, out: Sink) -> Ends:
        """What every message path does first: bind the rids whose first row this is,
        count the rows and ids, and read the last rows."""
        sparse = msg.sparse
        for row, rid, prompt, cached in sparse.new:
            self._bind(int(slots[row]), rid, prompt, cached, out)
        self.counters.rows += len(msg.slots)
        self.counters.tokens += len(msg.ids)
        return ends_of(sparse.ends)

    def on_arrays(self, msg: Arrays, out: Sink) -> None:
        """One ARRAYS message: bind new rids, decode plain rows as arrays, the rest per row."""
        n = len(msg.slots)
        if self.mapped and n >= self.mapped_rows:
            if self._on_mapped(msg, out):
                return
        elif n < self.small_rows and self._on_small(msg, out):
            return
        slots = msg.slots.astype(np.int64)
        sparse = msg.sparse
        n_rows = len(slots)
        if sparse.counts:
            id_starts = starts_of(np.frombuffer(sparse.counts, np.uint32).astype(np.int64))
        else:
            id_starts = np.arange(n_rows + 1, dtype=np.int64)
        ends = self._take(msg, slots, out)
        kinds = self.state.kind[slots] if n_rows else np.zeros(0, np.uint8)
        distinct = self.state.marks.distinct(slots, self.state.capacity)
        plain = kinds == PLAIN
        special = np.zeros(n_rows, bool)  # rows for the per-row path whatever their request
        fams = _Families(sparse.families, n_rows)
        quick_ends: list[int] = []
        late_ends: list[int] = []  # last rows ended after the plain rows, one by one
        if ends:
            end_rows = np.fromiter(ends, np.int64, len(ends))
            special[end_rows] = True
            plain[end_rows] = False
            if not distinct:
                _late_after_end(slots, end_rows, plain, special)
            # last rows of plain requests stay on the array path (their stop token blanked,
            # their held bytes flushed after); a stop string the scheduler matched is
            # trimmed from the text by the per-row rules
            quick_ends = sorted(row for row in end_rows[kinds[end_rows] == PLAIN].tolist()
                                if special[row] and stop_string(ends[row].finish) is None)
            special[quick_ends] = False
            if isinstance(self.plain, PlainDecoder):
                plain[quick_ends] = True
            else:  # byte fallback: its held byte runs end by the fallback decoder's rules
                late_ends, quick_ends = quick_ends, []
        plain_rows = np.flatnonzero(plain)
        if len(plain_rows):
            self._ordered_rows(msg, plain_rows, slots, id_starts, distinct, quick_ends, ends,
                               fams, out)
        if late_ends:
            self._plain_ends(late_ends, slots, msg, id_starts, ends, fams, out)
        others = np.flatnonzero(~plain & ((kinds == ROW) | special))
        ran = self._row_path(others, slots, msg, id_starts, ends, fams, out) if len(others) \
            else 0
        self.counters.late_rows += n_rows - len(plain_rows) - len(late_ends) - ran

    def _ordered_rows(self, msg: Arrays, plain_rows: I64, slots: I64, id_starts: I64,
                      distinct: bool, quick_ends: list[int], ends: Ends, fams: _Families,
                      out: Sink) -> None:
        """Decode a message's plain rows with the tokenizer's array decoder (rows in order),
        end its quick last rows, write."""
        assert self.plain is not None
        stops: dict[int, int] = {}  # last rows whose stop token is left out: its id
        ids = self._blank_stop_tokens(quick_ends, slots, msg.ids, id_starts, ends, stops) \
            if quick_ends else msg.ids
        texts = self._plain_rows(plain_rows, slots, ids, id_starts, distinct)
        # a plain slot always holds its rid (Slots.bind_plain)
        plain_slots = slots[plain_rows]
        end_at: list[int] = []  # where the last rows are among the plain rows
        if quick_ends:
            end_at = np.searchsorted(plain_rows, quick_ends).tolist()
            texts = self._flush_ends(texts, end_at, plain_slots[end_at], quick_ends, stops)
        rids = cast(list[str], self.state.rid_col.take(plain_slots).tolist())
        base = len(out)
        _RowsOut(out, msg, id_starts, fams).plain(plain_rows, rids, texts)
        if texts.attrs is not None:
            _attributions(out, base, texts.attrs)
        self._plain_extras(out, base, plain_rows, plain_slots, fams, msg.sparse.reasoning,
                           end_at, quick_ends, rids, ends)

    def _blank_stop_tokens(self, rows: list[int], slots: I64, ids: I64, id_starts: I64,
                           ends: Ends, stops: dict[int, int]) -> I64:
        return blank_stop_tokens(rows, ends, ids, id_starts,
                                 lambda row: self._no_stop_trim(int(slots[row])),
                                 self.info.vocab_size, stops)

    def _no_stop_trim(self, slot: int) -> bool:
        opts = self.opts.get(slot)  # a plain slot opened with defaults has no entry
        return opts is not None and opts.no_stop_trim

    def _flush_ends(self, texts: PlainTexts, at: list[int], slots: I64, rows: list[int],
                    stops: dict[int, int]) -> PlainTexts:
        """`_end_flush` for the whole-array code's texts."""
        c = texts.chars.tolist()
        extra_at, extra = self._end_flush(texts.attrs, at, slots, rows,
                                          lambda j: texts.text[c[j]:c[j + 1]], stops)
        return texts.with_suffixes(extra_at, extra) if extra else texts

    def _end_flush(self, attrs: list[list[Attribution] | None] | None, at: list[int],
                   slots: I64, rows: list[int], text_of: Callable[[int], str],
                   stops: dict[int, int]) -> tuple[list[int], list[str]]:
        """The end of last rows decoded as running ones (ending.py): their held bytes'
        flush, to go after the row's text (`text_of(j)`), then their attribution."""
        extra_at, extra = flush_held(self.state, at, slots)
        if attrs is not None and self.state.carry:
            end_attributions(self.state, attrs, at, slots, rows, [text_of(j) for j in at],
                             set(extra_at), stops)
        return extra_at, extra

    def _plain_extras(self, out: Sink, base: int, plain_rows: I64, plain_slots: I64,
                      fams: _Families, reasoning: bytes, end_at: list[int], ends_rows: list[int],
                      rids: list[str], ends: Ends
                      ) -> None:
        """What a message's plain rows (output rows base + j) carry beside text and ids:
        their logprobs' token texts, continuous usage, and the last rows' (`ends_rows`, at
        `end_at` among them) finish and final usage."""
        state = self.state
        if fams.families:  # the rows whose request wants its logprobs' texts
            wants = np.flatnonzero(state.lp_text[plain_slots])
            if len(wants):
                _logprob_texts(out, base, wants.tolist(), plain_rows[wants].tolist(), fams,
                               self.info)
        if state.usage_live:
            asked_flags = state.cont_usage[plain_slots].astype(bool)
            asked_flags[end_at] = False  # a last row carries its final usage below
            asked = np.flatnonzero(asked_flags)
            if len(asked):
                _continuous_usage(out, base, asked.tolist(), plain_rows[asked].tolist(),
                                  plain_slots[asked].tolist(), state, reasoning)
        if ends_rows:
            self._array_ends(out, base, end_at, ends_rows, rids, plain_slots, ends)

    def _array_ends(self, out: Sink, base: int, at: list[int], rows: list[int],
                    rids: list[str], plain_slots: I64,
                    ends: Ends) -> None:
        """The last rows' finish and usage (the request's own prompt and cached tokens, as
        its last row gives them), then their requests end."""
        completion = self.state.completion[plain_slots[at]].tolist()
        columns = isinstance(out, ColumnsOut)
        for j, row, done in zip(at, rows, completion):
            fin, prompt, cached, reasoning = ends[row]
            final = usage(prompt, done, cached, reasoning)
            if columns:
                assert isinstance(out, ColumnsOut)
                out.add_sparse("finish", base + j, fin)
                out.add_sparse("usage", base + j, final)
            else:
                delta = cast(list[Delta], out)[base + j]
                delta.finish, delta.usage = fin, final
            self._finish(rids[j], False, done, reasoning)
        if columns and self.state.usage_live:  # continuous usage rows came first
            assert isinstance(out, ColumnsOut)
            out.sparse["usage"].sort(key=_first)


    def _on_small(self, msg: Arrays, out: Sink) -> bool:
        """A message of few rows (shards/small.py): the same rules as below, with a few
        numpy calls per message instead of dozens. False (nothing done) for what only the
        vectorised code takes: a slot named twice, a byte-fallback tokenizer."""
        plain = self.plain
        slot_list: list[int] = msg.slots.tolist()
        if not isinstance(plain, PlainDecoder) or len(set(slot_list)) != len(slot_list):
            return False
        sp, state = msg.sparse, self.state
        n, ids = len(slot_list), msg.ids.tolist()
        ends = self._take(msg, slot_list, out)
        heads = state.meta[msg.slots].tolist()
        plain_rows = [r for r in range(n) if heads[r][KIND] == PLAIN and r not in ends]
        done = 0
        if plain_rows:
            all_rows = len(plain_rows) == n
            slots = slot_list if all_rows else [slot_list[r] for r in plain_rows]
            rows_heads = heads if all_rows else [heads[r] for r in plain_rows]
            row_ids: list[list[int]] | None = None
            counts: list[int] | None = None
            if sp.counts:
                cuts = [0, *accumulate(np.frombuffer(sp.counts, np.uint32).tolist())]
                row_ids = [ids[cuts[r]:cuts[r + 1]] for r in plain_rows]
                counts = list(map(len, row_ids))
                flat = list(chain.from_iterable(row_ids))
                singles = None
            else:
                flat = singles = ids if all_rows else [ids[r] for r in plain_rows]
            sent = flat  # the ids as they came, for the output
            texts, attrs = decode_small(plain.tables, plain.vocab, state, slots, rows_heads,
                                        row_ids, singles, plain.strs, plain.drops)
            vocab = plain.vocab
            if flat and (min(flat) < 0 or max(flat) >= vocab):  # as the byte tables index
                flat = [i if 0 <= i < vocab else vocab for i in flat]
            state.record_small(slots, rows_heads, flat, counts)
            rids = cast(list[str], list(map(state.rids.__getitem__, slots)))
            fams, base = _Families(sp.families, n), len(out)
            _small_out(out, rids, texts, sent, counts, plain_rows, n, fams, sp.families)
            if attrs is not None:
                _attributions(out, base, attrs)
            if sp.families:
                wants = [j for j, h in enumerate(rows_heads) if h[LP_TEXT]]
                if wants:
                    _logprob_texts(out, base, wants, [plain_rows[j] for j in wants], fams,
                                   self.info)
            if state.usage_live:
                asked = [j for j, h in enumerate(rows_heads) if h[CONT_USAGE]]
                if asked:
                    _continuous_usage(out, base, asked, [plain_rows[j] for j in asked],
                                      [slots[j] for j in asked], state, sp.reasoning)
            done = len(plain_rows)
        if ends or len(plain_rows) + len(ends) < n:  # last rows, per-row requests, late rows
            kinds = [h[KIND] for h in heads]
            done += self._rest_of_small(msg, plain_rows, kinds, ends, out)
        self.counters.late_rows += n - done
        return True

    def _on_mapped(self, msg: Arrays, out: Sink) -> bool:
        """A message of at least `mapped_rows` rows (shards/mapped.py): its texts by id
        lookup, the slots' numbers by a few whole-array operations, plain requests' last
        rows among them as on the array path. False (nothing done) for what the general
        code takes: a slot named twice, a byte-fallback tokenizer."""
        plain = self.plain
        if not isinstance(plain, PlainDecoder):
            return False
        sp, state = msg.sparse, self.state
        n = len(msg.slots)
        slots = msg.slots.astype(np.int64)
        if not n or not state.marks.distinct(slots, max(state.capacity, int(slots.max()) + 1)):
            return False
        ends = self._take(msg, slots, out)
        id_starts = starts_of(np.frombuffer(sp.counts, np.uint32).astype(np.int64)) \
            if sp.counts else None
        meta = state.meta[slots]
        kinds = meta[:, KIND]
        plain_mask = kinds == PLAIN
        quick, rest = _split_ends(ends, kinds, plain_mask)
        stops: dict[int, int] = {}  # quick last rows whose stop token is left out: its id
        ids = msg.ids
        if quick:
            ids = self._blank_stop_tokens(quick, slots, ids, np.arange(n + 1)
                                          if id_starts is None else id_starts, ends, stops)
        rows: list[int] = []
        if plain_mask.any():
            got = _gather(np.flatnonzero(plain_mask), slots, meta, _in_vocab(ids, plain.vocab),
                          msg.ids, id_starts)
            rows = got.rows.tolist()
            self._mapped_rows(msg, got, rows, quick, stops, ends, out)
        done = len(rows)
        if rest or done < n:  # per-row requests' rows, other last rows, late rows
            done += self._rest_of_small(msg, rows, kinds.tolist(), rest, out)
        self.counters.late_rows += n - done
        return True

    def _mapped_rows(self, msg: Arrays, got: _Gathered, rows: list[int], quick: list[int],
                     stops: dict[int, int], ends: Ends, out: Sink) -> None:
        """Decode a message's plain rows by id lookup, end its quick last rows, write."""
        plain, state, sp = self.plain, self.state, msg.sparse
        assert isinstance(plain, PlainDecoder)
        slots, meta, ids, id_starts, counts = got.slots, got.meta, got.ids, got.id_starts, \
            got.counts
        attrs = None
        want = meta[:, ATTR].astype(bool) if state.attr_live else None
        if want is not None and want.any():
            texts, attrs = decode_attributed(plain.id_texts, plain.tables, plain.vocab,
                                             plain.drops, state, slots, meta, want, ids,
                                             id_starts)
        else:
            texts = decode_mapped(plain.id_texts, state, slots, meta, ids, id_starts)
        if counts is None:
            state.record_one_each(slots, meta, ids)
        else:
            state.record_ids(slots, ids, id_starts)
            state.completion[slots] += counts
        end_at: list[int] = []
        if quick:
            end_at = quick if got.every else np.searchsorted(got.rows, quick).tolist()
            for j, text in zip(*self._end_flush(attrs, end_at, slots[end_at], quick,
                                                texts.__getitem__, stops)):
                texts[j] += text
        rids = cast(list[str], state.rid_col.take(slots).tolist())
        n = len(msg.slots)
        fams, base = _Families(sp.families, n), len(out)
        _small_out(out, rids, texts, got.sent.tolist(), None if counts is None else
                   counts.tolist(), rows, n, fams, sp.families)
        if attrs is not None:
            _attributions(out, base, attrs)
        self._plain_extras(out, base, got.rows, slots, fams, sp.reasoning, end_at, quick,
                           rids, ends)

    def _rest_of_small(self, msg: Arrays, plain_rows: list[int], kinds: list[int],
                       ends: Ends,
                       out: Sink) -> int:
        """The rows of a small message that are not plain running rows, by the same code as
        the vectorised path; how many ran."""
        slots = msg.slots.astype(np.int64)
        n = len(slots)
        if msg.sparse.counts:
            id_starts = starts_of(np.frombuffer(msg.sparse.counts, np.uint32).astype(np.int64))
        else:
            id_starts = np.arange(n + 1, dtype=np.int64)
        fams = _Families(msg.sparse.families, n)
        quick = [r for r in ends if kinds[r] == PLAIN and stop_string(ends[r].finish) is None]
        if quick:
            self._plain_ends(quick, slots, msg, id_starts, ends, fams, out)
        # the rest: rows of per-row requests, and last rows the quick end did not take
        taken = set(quick)
        others = sorted(r for r in range(n) if kinds[r] == ROW or (r in ends and r not in taken))
        ran = self._row_path(np.array(others, np.int64), slots, msg, id_starts, ends, fams,
                             out) if others else 0
        return len(quick) + ran

    def _plain_ends(self, rows: list[int], slots: I64, msg: Arrays, id_starts: I64,
                    ends: Ends, fams: _Families,
                    out: Sink) -> None:
        """Last rows of plain requests: the final flush, the scheduler's stop token left
        out of the text, usage; from the slot's arrays, with no Request built."""
        assert self.plain is not None
        state, st = self.state, id_starts.tolist()
        for row in rows:
            slot = int(slots[row])
            rid = state.rids[slot]
            if rid is None:  # ended by an earlier row of this message (a stop string)
                self.counters.late_rows += 1
                continue
            fin, prompt, cached, reasoning = ends[row]
            row_ids = msg.ids[st[row]:st[row + 1]].tolist()
            opts = self.opts.get(slot)
            decode_ids = row_ids
            trimmed = trims_stop_token(fin, self._no_stop_trim(slot), row_ids)
            if trimmed:
                decode_ids = row_ids[:-1]
            attrs: list[Attribution] | None = None
            if state.attr[slot]:  # id by id, as the per-row path attributes them
                assert isinstance(self.plain, PlainDecoder)
                vocab = self.info.vocab_size
                text, attrs = self.plain.finish_attributed(
                    state, slot, [i if 0 <= i < vocab else vocab for i in decode_ids],
                    row_ids[-1] if trimmed else None)
            else:
                text = self.plain.finish(state, slot, decode_ids)
            completion = int(state.completion[slot]) + len(row_ids)
            delta = Delta(rid, text, row_ids, attributions=attrs, finish=fin,
                          usage=usage(prompt, completion, cached, reasoning))
            if fams.carries(row):
                delta.logprobs, delta.top_logprobs, delta.token_ids_logprobs = fams.extras(row)
                if opts is not None and opts.logprob_text:
                    delta.token_texts, delta.top_texts = logprob_texts(
                        self.info, delta.logprobs, delta.top_logprobs)
            out.append(delta)
            self._finish(rid, False, completion, reasoning)

    def _plain_rows(self, rows: I64, slots: I64, ids: I64, id_starts: I64,
                    distinct: bool) -> PlainTexts:
        """Decode these rows on the array path; their ids go to their slots' rings."""
        assert self.plain is not None
        if len(rows) != len(slots):
            counts = id_starts[rows + 1] - id_starts[rows]
            if (counts == 1).all() and len(ids) == len(slots):
                ids, id_starts = ids[rows], np.arange(len(rows) + 1, dtype=np.int64)
            else:
                ids, id_starts = ids[ragged_index(id_starts[rows], counts)], starts_of(counts)
            slots = slots[rows]
        ids = _in_vocab(ids, self.info.vocab_size)
        self.state.record_ids(slots, ids, id_starts, distinct)
        return self.plain.decode(self.state, slots, ids, id_starts, distinct)

    def _row_path(self, rows: I64, slots: I64, msg: Arrays, id_starts: I64,
                  ends: Ends,
                  fams: _Families, out: Sink) -> int:
        """Rows of per-row requests and last rows, in row order; returns how many ran."""
        reasoning = np.frombuffer(msg.sparse.reasoning, np.uint32).tolist() \
            if msg.sparse.reasoning else None
        ids, st = msg.ids.tolist(), id_starts.tolist()
        objs, rids, vocab = self.state.objs, self.state.rids, self.info.vocab_size
        carrying = fams.get().carrying.tolist() if fams.families else None
        ran = 0
        for row, slot in zip(rows.tolist(), slots[rows].tolist()):
            req = objs[slot]
            if req is None:
                if rids[slot] is None:
                    continue  # ended earlier in this message (a stop string), or never bound
                req = self._as_request(slot)
            end = ends.get(row)
            if end is None:
                fin, prompt, cached = None, req.prompt_tokens, req.cached_tokens
                why = req.reasoning_tokens if reasoning is None else reasoning[row]
            else:
                fin, prompt, cached, why = end
            lp = top = tid = None
            if carrying is not None and carrying[row]:
                lp, top, tid = fams.extras(row)
            row_ids = ids[st[row]:st[row + 1]]
            safe = None
            if row_ids and (min(row_ids) < 0 or max(row_ids) >= vocab):
                safe = [i if 0 <= i < vocab else vocab for i in row_ids]
            delta = req.row(row_ids, fin, prompt, cached, why, lp, top, tid, safe)
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
            req = self._as_request(slot)
        elif opened is not None:
            req = opened.req or make_request(rid, self.info, opened.opts)
        elif rid in self.ended:
            self.counters.late_rows += 1
            return
        else:
            out.append(_terminal(rid, error))
            self._finish(rid, False)
            return
        out.append(req.end({"type": "abort"}, error))
        self._finish(rid, False, req.completion, req.reasoning_tokens)

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
        self.opts.clear()


_DEFAULT_OPEN = Open("")
_first = itemgetter(0)


def plain_decoder(info: TokenizerInfo,
                  min_rows: int) -> PlainDecoder | FallbackPlainDecoder | None:
    """The array path's decoder for this tokenizer, or None (every request per row)."""
    if not info.has_text:
        return None
    if info.byte_table is not None:
        return PlainDecoder(info, min_rows)
    return FallbackPlainDecoder.of(info, min_rows)


def _in_vocab(ids: I64, vocab: int) -> I64:
    """Ids as the byte tables index them: any id outside the vocabulary becomes `vocab`,
    whose entry is empty (the full decode drops such an id)."""
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        return np.where((ids < 0) | (ids >= vocab), vocab, ids)
    return ids


def _late_after_end(slots: I64, end_rows: I64, plain: npt.NDArray[np.bool_],
                    special: npt.NDArray[np.bool_]) -> None:
    """Rows after their request's last row in the same message (no scheduler sends one;
    a fuzzed frame may, even a second last row) are late: neither path sees them."""
    first_end: dict[int, int] = {}
    for row, slot in zip(end_rows.tolist(), slots[end_rows].tolist()):
        if slot not in first_end or row < first_end[slot]:
            first_end[slot] = row
    for row in np.flatnonzero(np.isin(slots, list(first_end))).tolist():
        if row > first_end[int(slots[row])]:
            plain[row] = special[row] = False


def _split_ends(ends: Ends, kinds: Any, plain: npt.NDArray[np.bool_]
                ) -> tuple[list[int], Ends]:
    """A message's last rows: those of plain requests without a scheduler-matched stop
    string end with the running rows (`plain` marks them, in place), the rest per row."""
    if not ends:
        return [], ends
    end_rows = np.fromiter(ends, np.int64, len(ends))
    plain[end_rows] = False
    quick = sorted(r for r in end_rows[kinds[end_rows] == PLAIN].tolist()
                   if stop_string(ends[r].finish) is None)
    if not quick:
        return quick, ends
    plain[quick] = True
    taken = set(quick)
    return quick, {r: e for r, e in ends.items() if r not in taken}


class _Gathered(NamedTuple):
    """A message's plain rows, gathered for a decoder: their message rows, slots and slot
    numbers, ids (in the vocabulary, stop tokens blanked) and ids as they came (`sent`, for
    the output), and per-row starts and counts (None: one id per row)."""

    rows: I64
    slots: I64
    meta: I64
    ids: I64
    sent: I64
    id_starts: I64 | None
    counts: I64 | None
    every: bool  # the message's every row: nothing was gathered


def _gather(rows: I64, slots: I64, meta: I64, ids: I64, sent: I64,
            id_starts: I64 | None) -> _Gathered:
    every = len(rows) == len(slots)
    counts = None
    if id_starts is not None:
        counts = id_starts[1:] - id_starts[:-1]
        if not every:
            counts = counts[rows]
            take = ragged_index(id_starts[rows], counts)
            ids, sent, id_starts = ids[take], sent[take], starts_of(counts)
    elif not every:
        ids, sent = ids[rows], sent[rows]
    if not every:
        slots, meta = slots[rows], meta[rows]
    return _Gathered(rows, slots, meta, ids, sent, id_starts, counts, every)


class _RowsOut:
    """Appends a message's plain rows to the output: columns at C speed, or Deltas."""

    __slots__ = ("out", "msg", "id_starts", "fams")

    def __init__(self, out: Sink, msg: Arrays, id_starts: I64, fams: _Families) -> None:
        self.out, self.msg, self.id_starts, self.fams = out, msg, id_starts, fams

    def plain(self, rows: I64, rids: list[str], texts: PlainTexts) -> None:
        out, ids, st = self.out, self.msg.ids, self.id_starts
        counts = st[rows + 1] - st[rows]
        one_each = len(ids) == len(self.msg.slots) and (counts == 1).all()
        row_ids = ids[rows] if one_each else ids[ragged_index(st[rows], counts)]
        fams = self.fams
        if isinstance(out, PackedOut):
            base = len(out.rids)
            out.add_rows(rids, texts.data, texts.char_lens(), counts, row_ids)
            if base == 0 and len(rows) == len(self.msg.slots):  # the message's rows, as is
                out.families += self.msg.sparse.families
                return
            for fam in self.msg.sparse.families:  # the numbers pass through
                out.families.append(shift(fam, rows, base))
            return
        if isinstance(out, ColumnsOut):
            base = len(out.rids)
            out.rids += rids
            out.texts += texts.texts()
            out.id_lens += counts.tolist()
            out.ids += row_ids.tolist()
            if fams.families:
                self._logprobs(out, rows, base)
            return
        flat = row_ids.tolist()
        cuts = starts_of(counts).tolist()
        for j, (rid, text, row) in enumerate(zip(rids, texts.texts(), rows.tolist())):
            delta = Delta(rid, text, flat[cuts[j]:cuts[j + 1]])
            if fams.carries(row):
                delta.logprobs, delta.top_logprobs, delta.token_ids_logprobs = fams.extras(row)
            out.append(delta)


    def _logprobs(self, out: ColumnsOut, rows: I64, base: int) -> None:
        _logprob_columns(out, self.fams.get(), rows.tolist(), base)


def _logprob_columns(out: ColumnsOut, fams: RowFamilies, rows: list[int], base: int) -> None:
    """The logprob values of these message rows, appended from output row `base` on as
    COLUMNS' sparse columns; only the rows that carry values cost a Python step."""
    carrying = fams.carrying
    for j, row in enumerate(rows):
        if carrying[row]:
            for field in FIELDS.values():
                val = fams.row(field, row)
                if val is not None:
                    out.add_sparse(field, base + j, val)


def _logprob_texts(out: Sink, base: int, outs: list[int], rows: list[int],
                   fams: _Families, info: TokenizerInfo) -> None:
    """`logprob_text` on the array path: the token texts of message rows `rows`, whose
    request wants them, written to output rows base + outs[k]; only those rows cost a
    Python step, and only the ones that carry logprobs get any."""
    read = fams.get()
    carrying = read.carrying
    for j, row in zip(outs, rows):
        if not carrying[row]:
            continue
        texts = read.texts("logprobs", row, info.token_texts)
        top_texts = read.texts("top_logprobs", row, info.token_texts)
        if isinstance(out, ColumnsOut):
            if texts is not None:
                out.add_sparse("token_texts", base + j, texts)
            if top_texts is not None:
                out.add_sparse("top_texts", base + j, top_texts)
        else:
            out[base + j].token_texts, out[base + j].top_texts = texts, top_texts


def _continuous_usage(out: Sink, base: int, outs: list[int], rows: list[int], slots: list[int],
                      state: Slots, reasoning: bytes) -> None:
    """`continuous_usage` on the array path: the usage so far of message rows `rows` (of
    slots `slots`), whose request asked for it, written to output rows base + outs[k]: the
    slot's completion count after the row, its first row's prompt and cached tokens, the
    row's reasoning tokens. Only those rows cost a Python step."""
    per_row = np.frombuffer(reasoning, np.uint32).tolist() if reasoning else None
    for j, row, numbers in zip(outs, rows, state.meta[slots].tolist()):
        completion, prompt = numbers[COMPLETION], numbers[PROMPT]
        so_far = usage(prompt, completion, numbers[CACHED],
                       per_row[row] if per_row is not None else 0)
        if isinstance(out, ColumnsOut):
            out.add_sparse("usage", base + j, so_far)
        else:
            out[base + j].usage = so_far


def _attributions(out: Sink, base: int, attrs: list[list[Attribution] | None]) -> None:
    """Rows' attributions (None: the row's request did not ask), written to output rows
    base + j: a Delta's field, or COLUMNS' and PACKED's sparse column (in row order; an
    empty list is a value, as the per-row path sends it)."""
    if isinstance(out, ColumnsOut):
        col = out.sparse.setdefault("attributions", [])
        col += [(base + j, a) for j, a in enumerate(attrs) if a is not None]
        return
    for j, a in enumerate(attrs):
        if a is not None:
            out[base + j].attributions = a


def _small_out(out: Sink, rids: list[str], texts: list[str], flat: list[int],
               counts: list[int] | None, rows: list[int], n: int, fams: _Families,
               families: list[Any]) -> None:
    """A small message's plain rows into the output, as `_RowsOut.plain` does: their ids
    flat (as they came) with per-row `counts`, or (counts None) each row's one id."""
    if isinstance(out, PackedOut):
        base = len(out.rids)
        out.add_rows(rids, "".join(texts).encode(), list(map(len, texts)),
                     [1] * len(flat) if counts is None else counts, flat)
        if families:
            if base == 0 and len(rows) == n:  # the message's rows, numbered as they are
                out.families += families
            else:
                keep = np.array(rows, np.int64)
                out.families += [shift(fam, keep, base) for fam in families]
        return
    if isinstance(out, ColumnsOut):
        base = len(out.rids)
        out.rids += rids
        out.texts += texts
        out.id_lens += [1] * len(flat) if counts is None else counts
        out.ids += flat
        if families:
            _logprob_columns(out, fams.get(), rows, base)
        return
    if counts is None:
        row_ids = [[i] for i in flat]
    else:
        cuts = [0, *accumulate(counts)]
        row_ids = [flat[a:b] for a, b in zip(cuts, cuts[1:])]
    for rid, text, ids_, r in zip(rids, texts, row_ids, rows):
        d = Delta(rid, text, ids_)
        if fams.carries(r):
            d.logprobs, d.top_logprobs, d.token_ids_logprobs = fams.extras(r)
        out.append(d)


class _Families:
    """A message's logprob families, read into per-row lists only if a row asks."""

    __slots__ = ("families", "rows", "_read")

    def __init__(self, families: list[Any], rows: int) -> None:
        self.families, self.rows = families, rows
        self._read: RowFamilies | None = None

    def get(self) -> RowFamilies:
        if self._read is None:
            self._read = RowFamilies(self.families, self.rows)
        return self._read

    def carries(self, row: int) -> bool:
        return bool(self.families) and bool(self.get().carrying[row])

    def extras(self, row: int) -> tuple[Any, Any, Any]:
        fams = self.get()
        lp, top, tid = (fams.row(f, row) for f in FIELDS.values())
        return lp, top, tid


def _terminal(rid: str, error: str | None) -> Delta:
    return terminal(rid, error, Usage(0, 0, 0, 0, 0))
