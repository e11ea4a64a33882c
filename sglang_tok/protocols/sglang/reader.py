"""SGLang's scheduler messages (`--protocol sglang`) read into what the egress routes.

A `BatchTokenIDOutput` becomes the same `Batch` a BATCH frame decodes to (rids, finish
reasons, counts, every row's new ids as one int64 buffer), so routing, slots, the ledger
and the shards' decoding are the native protocol's. What OPEN carries in that protocol
comes from a request's first row here: its prompt context (the ids before
`read_offsets[i]`) and its flags. What SGLang's detokenizer passes through to the
TokenizerManager is cut per shard as raw msgpack (`reply.Passed`), never decoded.

Where each column sits is the running release's (`plan.Plan`, by field name from its
`Layout`): a message whose field count is not that release's is dropped whole, never read
with another release's order.

A row is its request's first when its `completion_tokens` (the request's output ids so far)
are exactly the ids it carries: SGLang's scheduler counts them that way on every row. So an
ended rid whose row is a first row is a new request under a reused rid (a client may send a
finished request's rid again), while a late row of the old one counts more; and an unknown
rid whose row is not its first is a request whose start never reached this egress.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Meta, Raw

from sglang_tok.finish import Finish, Stop
from sglang_tok.protocols import interface
from sglang_tok.protocols.errors import FrameError, checked_finishes
from sglang_tok.protocols.interface import LATE, Event, Idle, PassOn, Probe
from sglang_tok.protocols.native.batch import Batch, BatchHeader
from sglang_tok.protocols.native.control import Open, Ping, decode_control
from sglang_tok.protocols.native.tags import TAG_PING
from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.pickled import cut_pickled, from_pickle
from sglang_tok.protocols.sglang.plan import CONFIGURE_LOGGING, EMBEDDING, FREEZE_GC, Plan
from sglang_tok.protocols.sglang.reply import (
    Passed,
    Reply,
    beam_flags,
    by_worker,
    cut,
    encode_passed,
)
from sglang_tok.protocols.sglang.workers import WorkerMap

_ENDPOINTS = ("ipc://", "tcp://")
_EMPTY = Raw(b"\x90")  # [] in msgpack
NonNeg = Annotated[int, Meta(ge=0)]
# the columns the egress reads, each decoded from its raw field alone (validated by type:
# counts are not negative); every other field is passed on as it came
_READ: dict[str, msgspec.msgpack.Decoder[Any]] = {
    name: msgspec.msgpack.Decoder(kind) for name, kind in (
        ("rids", list[str] | None), ("http_worker_ipcs", list[str | None] | None),
        ("finished_reasons", list[Finish | None] | None),
        ("decoded_texts", list[str] | None),
        ("decode_ids", list[msgspec.msgpack.Ext] | None),  # SGLang's: one array ext per row
        ("read_offsets", list[NonNeg] | None),
        ("skip_special_tokens", list[bool] | None),
        ("spaces_between_special_tokens", list[bool] | None),
        ("no_stop_trim", list[bool] | None), ("prompt_tokens", list[NonNeg] | None),
        ("reasoning_tokens", list[NonNeg] | None), ("completion_tokens", list[NonNeg] | None),
        ("cached_tokens", list[NonNeg] | None))}
# finish reasons the typed decode refused, read again as any maps to say why (`_columns`)
_loose_finishes = msgspec.msgpack.Decoder(list[dict[str, Any] | None] | None)
_ipcs_decoder = msgspec.msgpack.Decoder(list[str | None] | None)
_level_decoder = msgspec.msgpack.Decoder(str | None)
_tag_decoder = msgspec.msgpack.Decoder(str)


class Step:
    """One scheduler message as the egress routes it."""

    __slots__ = ("plan", "batch", "rids", "ipcs", "columns", "opens", "fresh", "lost",
                 "refused", "per_row", "flags")

    def __init__(self, plan: Plan, batch: Batch, cols: Columns, columns: list[Raw],
                 firsts: FirstRows, per_row: bool) -> None:
        self.plan = plan
        self.batch = batch
        self.rids = cols.rids
        self.ipcs = cols.ipcs
        # rows with beam search output: the shard decodes their sequences with each row's
        # options, which only the first row of a request told it otherwise
        self.flags = beam_flags(cols.skip, cols.spaces, cols.no_stop_trim) \
            if plan.beams >= 0 and columns[plan.beams] != wire.NIL else []
        self.columns = columns  # the passed-through fields, in the plan's `passed` order
        self.opens = firsts.opens
        self.fresh = firsts.fresh
        self.lost = firsts.lost
        self.refused = firsts.refused
        self.per_row = per_row  # the pickled columns may be cut per row (their sender's ours)

    def passed(self, codes: list[int], nshards: int, inline: bool = False) -> dict[int, Any]:
        """Each shard's rows of the passed-through fields, in the order `split_frame` gives
        its rows (frame order within a shard; LATE rows in no shard); `inline`: the one
        shard inside the egress's process takes the `Passed` itself."""
        rids, ipcs, flags = self.rids, self.ipcs, self.flags
        if nshards == 1 and LATE not in codes:  # the usual one-shard message: no array work
            if inline:
                return {0: Passed(rids, ipcs, self.columns, flags)}
            return {0: encode_passed(rids, ipcs, self.columns, flags)}
        code = np.array(codes, np.int64)
        live = code != LATE
        shard = code % nshards
        owners = np.unique(shard[live]).tolist()
        if len(owners) == 1 and live.all():  # one shard's whole message: nothing to cut
            return {owners[0]: encode_passed(rids, ipcs, self.columns, flags)}
        parts = [np.flatnonzero(live & (shard == k)).tolist() for k in owners]
        pickled = self.plan.pickled_passed
        cols = cut(self.columns, len(rids), parts, pickled)
        if self.per_row:
            cut_pickled(self.columns, parts, cols, pickled, self.plan.passed)
        return {k: encode_passed([rids[i] for i in rows],
                                 None if ipcs is None else [ipcs[i] for i in rows], part,
                                 [flags[i] for i in rows] if flags else [])
                for k, rows, part in zip(owners, parts, cols)}


class FirstRows:
    """What a message's rows of rids the router does not route say (`SglangReader._first_rows`)."""

    __slots__ = ("opens", "fresh", "lost", "refused")

    def __init__(self) -> None:
        self.opens: list[Open] = []  # first rows whose options are not the defaults
        self.fresh: list[str] = []  # the other first rows' rids
        # unknown rids whose row is not their first: their start is gone (they were in
        # flight when the service, or its egress, started); they end, never half decoded
        self.lost: list[str] = []
        # (rid, why): rows the service will not decode; their requests end, not the message
        self.refused: list[tuple[str, str]] = []


class Columns:
    """The columns of a `BatchTokenIDOutput` the egress reads, each checked to have one
    entry per row (`SglangReader._columns`), beside the message's raw fields."""

    __slots__ = ("fields", "rids", "ipcs", "finished", "decode_ids", "read_offsets", "skip",
                 "spaces", "no_stop_trim", "prompt", "reasoning", "completion", "cached")

    def __init__(self, fields: list[Raw], got: dict[str, Any]) -> None:
        self.fields = fields
        self.rids: list[str] = got["rids"]
        self.ipcs: list[str | None] | None = got["http_worker_ipcs"]
        self.finished: list[Finish | None] = got["finished_reasons"]
        self.decode_ids: list[Any] = got["decode_ids"]
        self.read_offsets: list[int] = got["read_offsets"]
        self.skip: list[bool] = got["skip_special_tokens"]
        self.spaces: list[bool] = got["spaces_between_special_tokens"]
        self.no_stop_trim: list[bool] = got["no_stop_trim"]
        self.prompt: list[int] = got["prompt_tokens"]
        self.reasoning: list[int] = got["reasoning_tokens"]
        self.completion: list[int] = got["completion_tokens"]
        self.cached: list[int] = got["cached_tokens"]


class SglangReader:
    """Reads and validates scheduler messages whole: a message is accepted or dropped.
    `workers` keeps each live request's tokenizer worker (shared with the egress's
    writer, which sends the service's own last rows there). `per_row`: the input is
    SGLang's own process tree (ipc://), so the pickled columns (per-row time stats,
    customized info) may be unpickled to cut them per shard; from a tcp:// peer they are
    never unpickled (a part of a message then carries them as nil)."""

    def __init__(self, plan: Plan, max_rid_length: int, max_row_ids: int,
                 keep_stop_ids: frozenset[int], workers: WorkerMap, per_row: bool = False,
                 out: Callable[[list[Reply]], list[Reply]] | None = None) -> None:
        self.plan = plan
        # what a message passed on as it came becomes for the TokenizerManager (pickled
        # again, for a pickle-IPC release)
        self.out = out or (lambda parts: parts)
        # a release that sends pickles (0.5.12-0.5.14): only from SGLang's own process tree
        self.pickle_ipc = plan.layout.ipc == "pickle"
        # SGLang 0.5.15-0.5.18 send an `array` as a [typecode, bytes] pair, not an ext
        self.pairs = plan.layout.arrays == "pair"
        self.max_rid_length = max_rid_length
        self.max_row_ids = max_row_ids
        self.keep = keep_stop_ids
        # the release's own trim rules (layout.trim_rules)
        self.through = plan.layout.kept_stop_str == "through"
        self.zero_kept = not plan.layout.stop_id_zero_trimmed
        self.workers = workers
        self.per_row = per_row

    def read(self, frame: memoryview, where: dict[str, int]) -> Event:
        """One scheduler message; or the HTTP process's deep health probe, a native PING
        (no msgpack array starts with its tag), whose PONGs never go to SGLang."""
        if frame[0] == TAG_PING:
            ping = decode_control(frame)
            if isinstance(ping, Ping) and ping.nonce < 0:
                return Probe(ping.nonce, frame, counted=False)
            return Idle("ping")
        if self.pickle_ipc:
            frame = memoryview(from_pickle(frame, self.plan.layout))
        fields = self._fields(frame)
        plan = self.plan
        if fields[0] == wire.TOKEN_IDS_TAG:
            if len(fields) - 1 != plan.count:
                raise FrameError("columns", f"{len(fields) - 1} fields, where SGLang "
                                 f"{plan.layout.release}'s BatchTokenIDOutput has {plan.count}: "
                                 "a message of another SGLang release than the one the service "
                                 "was started for", self._readable_rids(fields))
            rids = fields[plan.at["rids"]]
            if rids == wire.NIL or rids == _EMPTY:
                return Idle("sglang_idle")  # an idle batch: nothing to decode or answer
            step = self.step(fields, where)
            return interface.Rows(step.batch, opens=step.opens, fresh=step.fresh,
                                  ends=step.refused, lost=step.lost, passed=step.passed)
        return self._other(fields, frame)

    def _other(self, fields: list[Raw], frame: memoryview) -> Event:
        """A message other than a BatchTokenIDOutput, by its tag; its fields read by name."""
        plan = self.plan
        try:
            tag = _tag_decoder.decode(fields[0])
            if tag == EMBEDDING:
                ipcs = _ipcs_decoder.decode(fields[plan.embedding_ipcs]) \
                    if 0 < plan.embedding_ipcs < len(fields) else None
                return PassOn(self.out(by_worker(bytes(frame), ipcs, plan.embedding_whole)))
            if tag == FREEZE_GC:
                gc.freeze()
                return Idle("freeze_gc")
            if tag == CONFIGURE_LOGGING:
                level = _level_decoder.decode(fields[plan.log_level_at]) \
                    if 0 < plan.log_level_at < len(fields) else None
                if level:
                    logging.getLogger().setLevel(level.upper())
                return Idle("configure_logging")
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FrameError("header", str(exc)[:200], self._readable_rids(fields)) from None
        raise FrameError("unknown_tag", "an SGLang message the detokenizer does not take: "
                         f"{bytes(fields[0])[:40]!r}", self._readable_rids(fields))

    def _fields(self, frame: memoryview) -> list[Raw]:
        count = wire.array_length(frame)
        if count < 1:
            raise FrameError("header", "not a msgpack array: not an SGLang IPC message "
                             "(pickle IPC? start SGLang with SGLANG_USE_PICKLE_IPC=0, as "
                             "the sglang_tok plugin does)")
        try:
            return wire.fields_decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise FrameError("header", str(exc)[:200]) from None

    def _readable_rids(self, fields: list[Raw]) -> list[str]:
        """The rids of a message that failed validation, when its rids field still reads."""
        at = self.plan.at["rids"]
        try:
            rids = msgspec.msgpack.decode(fields[at]) if at < len(fields) else []
        except (msgspec.DecodeError, ValueError, RecursionError):
            return []
        if not isinstance(rids, list):
            return []
        return [r for r in rids if isinstance(r, str) and r]

    def step(self, fields: list[Raw], where: dict[str, int]) -> Step:
        """The message as a Batch, validated whole; raise FrameError."""
        cols = self._columns(fields)
        try:
            return self._step(cols, where)
        except ValueError as exc:  # an ids ext that is not integer ids
            raise FrameError("header", str(exc)[:200], cols.rids) from None

    def _step(self, r: Columns, where: dict[str, int]) -> Step:
        rids, n = r.rids, len(r.rids)
        flat, counts = wire.ids_of_pairs(r.decode_ids) if self.pairs \
            else wire.ids_column(r.decode_ids)
        owner = list(map(where.get, rids))
        firsts = FirstRows()
        self._refuse(r, counts, owner, firsts)
        unrouted = [i for i, code in enumerate(owner) if code is None or code == LATE] \
            if None in owner or LATE in owner else []
        if unrouted:
            flat = self._first_rows(r, flat, counts, unrouted, owner, firsts)
        fins = r.finished
        if fins.count(None) != n:
            fins = fins.copy()
            for i, fin in enumerate(fins):
                if fin is not None:
                    fins[i] = self._for_shard(fin)
        header = BatchHeader(rids, fins, r.prompt, counts, r.cached, r.reasoning)
        batch = Batch(header, memoryview(flat.data).cast("B"), len(flat), [])
        ipcs = r.ipcs
        if ipcs is not None and ipcs.count(None) != n:
            self._track_workers(r, ipcs, unrouted)
        return Step(self.plan, batch, r, self._passed_columns(r.fields), firsts, self.per_row)

    def _columns(self, fields: list[Raw]) -> Columns:
        """The read columns, typed, each one entry per row; the others one entry per row
        or absent; or FrameError naming the message's rids."""
        at = self.plan.at
        have = len(fields)
        got: dict[str, Any] = {}
        rids: list[str] = []
        loose = None  # finish reasons the typed decode refused
        for name, decoder in _READ.items():
            i = at[name]
            if name == "decode_ids" and self.pairs:
                decoder = _pairs_decoder
            try:
                got[name] = decoder.decode(fields[i]) if i < have else None
            except msgspec.ValidationError as exc:
                if name == "finished_reasons":
                    got[name] = loose = _any_finishes(fields[i], rids)
                elif name != "decode_ids" or self.pairs:
                    raise FrameError("header", f"{name}: {str(exc)[:160]}", rids) from None
                else:
                    got[name] = _any_ids(fields[i], rids)
            except msgspec.DecodeError as exc:
                raise FrameError("header", f"{name}: {str(exc)[:160]}", rids) from None
            if name == "rids":
                rids = got[name] or []
        n = len(rids)
        for name in _ROW_FIELDS:
            col = got[name]
            if col is None or len(col) != n:
                raise FrameError("columns", f"{name} has {'nil' if col is None else len(col)} "
                                 f"entries, expected {n}", rids)
        at_out = at["output_ids"]
        if at_out >= have or wire.array_length(fields[at_out]) != n:
            raise FrameError("columns", f"output_ids is not a list of {n} arrays", rids)
        self._other_columns(fields, n, rids, self.plan.other_columns)
        cols = Columns(fields, got)
        if cols.ipcs is not None and cols.ipcs.count(None) != n:
            _check_ipcs(cols.ipcs, n, rids)
        if loose is not None:
            cols.finished = checked_finishes(loose, rids)
        return cols

    @staticmethod
    def _other_columns(fields: list[Raw], n: int, rids: list[str],
                       others: tuple[tuple[str, int], ...]) -> None:
        """Every other column is nil, [] (absent for every row) or one entry per row."""
        have, nil = len(fields), wire.NIL
        for name, i in others:
            if i >= have or fields[i] == nil or wire.is_wrapped(fields[i]):
                continue  # absent, or one pickle of the whole message's value
            got = wire.array_length(fields[i])
            if got == -2:
                raise FrameError("columns", f"{name} is not a list", rids)
            if got > 0 and got != n:
                raise FrameError("columns", f"{name} has {got} entries, expected {n}", rids)

    def _passed_columns(self, fields: list[Raw]) -> list[Raw]:
        """The fields a reply passes on, as they came (the per-row tensors in base64, as
        SGLang's detokenizer sends them)."""
        nil = wire.NIL
        cols = [fields[i] for i in self.plan.passed_at]
        for k in self.plan.b64:
            if cols[k] != nil:
                cols[k] = wire.b64_tensors(cols[k], self.pairs)
        return cols

    def _refuse(self, r: Columns, counts: list[int], owner: list[int | None],
                firsts: FirstRows) -> None:
        """Rows the service will not decode end their own request, not the message: a rid
        that is empty or over --max-rid-length, a row over --max-row-ids."""
        limit, most = self.max_rid_length, self.max_row_ids
        rids = r.rids
        bad: list[tuple[int, str]] = []
        if not all(rids) or (limit and max(map(len, rids), default=0) > limit):
            bad += [(i, f"rid longer than --max-rid-length {limit}" if rid else "empty rid")
                    for i, rid in enumerate(rids) if not rid or (limit and len(rid) > limit)]
        if most and max(counts, default=0) > most:
            bad += [(i, f"a row of more than --max-row-ids {most} ids")
                    for i, count in enumerate(counts) if count > most]
        for i, why in bad:
            if owner[i] != LATE:  # once per request: then its rows are late
                firsts.refused.append((rids[i], why))
            owner[i] = LATE

    def _first_rows(self, r: Columns, flat: np.ndarray, counts: list[int], unrouted: list[int],
                    owner: list[int | None], firsts: FirstRows) -> np.ndarray:
        """Rows of rids the router does not route: a first row's options and prompt context
        (its ids before `read_offsets[i]`, cut out of `flat`), or a late or lost row; the
        ids without the context."""
        refused = {rid for rid, _ in firsts.refused}
        starts = np.cumsum(counts) - counts if unrouted else counts
        cut: list[tuple[int, int]] = []
        beams = _beam_rows(r.fields, self.plan.beams_at)
        for i in unrouted:
            rid, at = r.rids[i], r.read_offsets[i]
            if rid in refused:
                continue
            # a beam group's leader sends one row, at its end, counting every sequence's
            # ids: it is its first row whatever it counts
            if r.completion[i] != counts[i] - at and i not in beams:  # not its first row
                if owner[i] is None:
                    firsts.lost.append(rid)
                continue  # else a late row of an ended request
            prompt: list[int] = []
            if at:
                start = int(starts[i])
                prompt = flat[start:start + at].tolist()
                cut.append((start, at))
                counts[i] -= at
            skip, no_trim, spaces = r.skip[i], r.no_stop_trim[i], r.spaces[i]
            if prompt or not skip or no_trim or not spaces or owner[i] == LATE:
                firsts.opens.append(Open(rid, skip_special_tokens=skip,
                                         spaces_between_special_tokens=spaces,
                                         no_stop_trim=no_trim, prompt_ids=prompt,
                                         trim_after_stop=no_trim and self.through))
            else:
                firsts.fresh.append(rid)
        if not cut:
            return flat
        keep = np.ones(len(flat), bool)
        for start, size in cut:
            keep[start:start + size] = False
        return flat[keep]

    def _for_shard(self, fin: Finish) -> Finish:
        """The finish the shard trims by (the reply carries the scheduler's own): SGLang
        leaves a stop token out only when `matched` is one id that is not a tool-call
        closer it keeps (--keep-stop-ids); a list of ids is not trimmed either, nor id 0
        before 0.5.21 (`if not matched`)."""
        if type(fin) is not Stop:
            return fin
        matched = fin.matched
        if isinstance(matched, list) or (type(matched) is int and (
                matched in self.keep or (matched == 0 and self.zero_kept))):
            return msgspec.structs.replace(fin, matched=msgspec.UNSET)
        return fin

    def _track_workers(self, r: Columns, ipcs: list[str | None], firsts: list[int]) -> None:
        """Remember each live request's tokenizer worker, for the egress's own last rows."""
        rids = r.rids
        self.workers.note([rids[i] for i in firsts], [ipcs[i] for i in firsts])
        # a finished row does not forget its worker here: until its shard acknowledges the
        # row, a shard that dies fails the request, and that error goes to the same worker
        # (the egress forgets it once the last delta left the shard: `Ledger.take_gone`)


def _beam_rows(fields: list[Raw], at: int) -> frozenset[int]:
    """The rows that carry beam search output (none, in a message without the column)."""
    if not at or at >= len(fields) or fields[at] == wire.NIL:
        return frozenset()
    return frozenset(i for i, b in enumerate(wire.rows_of(fields[at])) if b != wire.NIL)


# per-row columns every BatchTokenIDOutput row has
_ROW_FIELDS = ("finished_reasons", "decoded_texts", "decode_ids", "read_offsets",
               "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
               "prompt_tokens", "reasoning_tokens", "completion_tokens", "cached_tokens")
_pairs_decoder = msgspec.msgpack.Decoder(list[tuple[str, bytes]] | None)
_ids_rows = msgspec.msgpack.Decoder(list[msgspec.msgpack.Ext | list[int]] | None)


def _any_finishes(raw: Raw, rids: list[str]) -> list[Any]:
    """finished_reasons the typed decode refused, as any maps (or FrameError, as a column
    that is not a list of maps or nils)."""
    try:
        got = _loose_finishes.decode(raw)
    except msgspec.ValidationError as exc:
        raise FrameError("header", f"finished_reasons: {str(exc)[:160]}", rids) from None
    return [] if got is None else got


def _any_ids(raw: Raw, rids: list[str]) -> list[Any] | None:
    """decode_ids in another form than an ext per row (plain lists of ints too)."""
    try:
        return _ids_rows.decode(raw)
    except msgspec.ValidationError as exc:
        raise FrameError("header", f"decode_ids: {str(exc)[:160]}", rids) from None


def _check_ipcs(ipcs: list[str | None], n: int, rids: list[str]) -> None:
    """Every worker named is an endpoint (a column of n nils is fine: checked by count)."""
    if len(ipcs) != n:
        raise FrameError("columns", f"http_worker_ipcs has {len(ipcs)} entries, expected {n}",
                         rids)
    bad = [i for i in ipcs if i is not None and not i.startswith(_ENDPOINTS)]
    if bad:
        raise FrameError("columns", f"http_worker_ipcs entry {bad[0]!r:.80} is not an ipc:// "
                         "or tcp:// endpoint", rids)
