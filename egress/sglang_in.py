"""SGLang's scheduler messages (`--protocol sglang`) read into what the egress routes.

A `BatchTokenIDOutput` becomes the same `Batch` a BATCH frame decodes to (rids, finish
reasons, counts, every row's new ids as one int64 buffer), so routing, slots, the ledger
and the shards' decoding are the native protocol's. What OPEN carries in that protocol
comes from a request's first row here: its prompt context (the ids before
`read_offsets[i]`) and its flags. What SGLang's detokenizer passes through to the
TokenizerManager is cut per shard as raw msgpack (`reply.Passed`), never decoded.

A row is its request's first when its `completion_tokens` (the request's output ids so far)
are exactly the ids it carries: SGLang's scheduler counts them that way on every row. So an
ended rid whose row is a first row is a new request under a reused rid (a client may send a
finished request's rid again), while a late row of the old one counts more; and an unknown
rid whose row is not its first is a request whose start never reached this egress.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Raw
from sglang_tok.ring.link import LATE

from sglang_tok.integrations.sglang import wire
from sglang_tok.integrations.sglang.reply import PICKLED_AT, Replies, encode_passed
from sglang_tok.protocol import FINISH_TYPES, Batch, BatchHeader, FrameError, Open

_B64_FIELDS = ("routed_experts", "indexer_topk")


class Step:
    """One scheduler message as the egress routes it."""

    __slots__ = ("batch", "opens", "fresh", "lost", "msg", "columns")

    def __init__(self, batch: Batch, msg: wire.TokenIds, columns: list[Any]) -> None:
        self.batch = batch
        self.msg = msg
        self.columns = columns  # the passed-through fields, in wire.PASSED_FIELDS order
        self.opens: list[Open] = []  # first rows whose options are not the defaults
        self.fresh: list[str] = []  # the other first rows' rids
        # unknown rids whose row is not their first: their start is gone (they were in
        # flight when the service, or its egress, started); they end, never half decoded
        self.lost: list[str] = []

    def passed(self, codes: list[int], nshards: int) -> dict[int, bytes]:
        """Each shard's rows of the passed-through fields, in the order `split_frame` gives
        its rows (frame order within a shard; LATE rows in no shard)."""
        ipcs = self.msg.http_worker_ipcs
        if nshards == 1 and LATE not in codes:
            return {0: encode_passed(ipcs, [_as_raw(c) for c in self.columns])}
        by_shard: dict[int, list[int]] = {}
        for i, code in enumerate(codes):
            if code != LATE:
                by_shard.setdefault(code % nshards, []).append(i)
        if len(by_shard) == 1 and LATE not in codes:  # one shard's whole: nothing to cut
            return {k: encode_passed(ipcs, [_as_raw(c) for c in self.columns])
                    for k in by_shard}
        cut = [_Column(c, i in PICKLED_AT) for i, c in enumerate(self.columns)]
        return {k: encode_passed(None if ipcs is None else [ipcs[i] for i in rows],
                                 [c.rows(rows) for c in cut])
                for k, rows in by_shard.items()}


class _Column:
    """A passed-through column, cut into rows once for every shard's share."""

    __slots__ = ("value", "cells")

    def __init__(self, value: Any, pickled: bool) -> None:
        # a pickle holds every row and cannot be cut without unpickling it: parts get nil
        self.value = wire.NIL if pickled else value
        self.cells: list[Any] | None = None
        if isinstance(value, list):
            self.cells = value
        elif not pickled and wire.array_length(value) > 0:
            self.cells = wire.rows_of(value)

    def rows(self, rows: list[int]) -> Any:
        if self.cells is None:  # nil, or [] (absent for every row): as it came
            return _as_raw(self.value)
        cells = self.cells
        return Raw(wire.encoder.encode([cells[i] for i in rows]))


def _as_raw(value: Any) -> Raw:
    return value if isinstance(value, Raw) else Raw(wire.encoder.encode(value))


class Rows:
    """A message's per-row columns once `SglangIn._rows` has checked each has a row each."""

    __slots__ = ("msg", "rids", "finished", "decode_ids", "read_offsets", "skip", "spaces",
                 "no_stop_trim", "prompt", "reasoning", "completion", "cached")

    def __init__(self, msg: wire.TokenIds) -> None:
        self.msg = msg
        self.rids: list[str] = msg.rids or []
        self.finished: list[dict[str, Any] | None] = msg.finished_reasons or []
        self.decode_ids: list[Any] = msg.decode_ids or []
        self.read_offsets: list[int] = msg.read_offsets or []
        self.skip: list[bool] = msg.skip_special_tokens or []
        self.spaces: list[bool] = msg.spaces_between_special_tokens or []
        self.no_stop_trim: list[bool] = msg.no_stop_trim or []
        self.prompt: list[int] = msg.prompt_tokens or []
        self.reasoning: list[int] = msg.reasoning_tokens or []
        self.completion: list[int] = msg.completion_tokens or []
        self.cached: list[int] = msg.cached_tokens or []


class SglangIn:
    """Reads and validates scheduler messages whole: a message is accepted or dropped."""

    def __init__(self, max_rid_length: int, max_row_ids: int) -> None:
        self.max_rid_length = max_rid_length
        self.max_row_ids = max_row_ids
        self.replies = Replies()  # the egress's own last rows, routed to their workers

    def decode(self, frame: memoryview) -> wire.Inbound:
        count = wire.field_count(frame)
        if count < 1:
            raise FrameError("header", "not a msgpack array: not an SGLang IPC message "
                             "(pickle IPC? start SGLang with SGLANG_USE_PICKLE_IPC=0, as "
                             "the sglang_tok plugin does)")
        if count > 1 + wire.MAX_FIELDS:
            raise FrameError("columns", f"{count - 1} fields, more than {wire.TOKEN_IDS}'s "
                             f"{wire.MAX_FIELDS}", _readable_rids(frame))
        try:
            return wire.inbound_decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            reason = "unknown_tag" if "$[0]" in str(exc) else "header"
            raise FrameError(reason, str(exc)[:200], _readable_rids(frame)) from None

    def step(self, msg: wire.TokenIds, where: dict[str, int]) -> Step:
        """The message as a Batch, validated whole; raise FrameError."""
        try:
            return self._step(self._rows(msg), where)
        except ValueError as exc:  # an ids ext that is not integer ids
            raise FrameError("header", str(exc)[:200], msg.rids or []) from None

    def _step(self, r: Rows, where: dict[str, int]) -> Step:
        rids, n = r.rids, len(r.rids)
        ids = list(map(wire.int64_bytes, r.decode_ids))
        owner = list(map(where.get, rids))
        firsts = [i for i, code in enumerate(owner) if code is None or code == LATE]
        opens: list[Open] = []
        fresh: list[str] = []
        lost: list[str] = []
        if firsts:
            self._first_rows(r, ids, firsts, owner, (opens, fresh, lost))
        lens = [len(b) >> 3 for b in ids]
        if self.max_row_ids and max(lens, default=0) > self.max_row_ids:
            raise FrameError("limit_row_ids", f"row with more than --max-row-ids "
                             f"{self.max_row_ids} ids", rids)
        fins = r.finished
        header = BatchHeader(rids, fins if fins.count(None) == n else list(map(_for_shard, fins)),
                             r.prompt, lens, r.cached, r.reasoning)
        step = Step(Batch(header, memoryview(b"".join(ids)), sum(lens), []), r.msg,
                    self._columns(r.msg))
        step.opens, step.fresh, step.lost = opens, fresh, lost
        if r.msg.http_worker_ipcs is not None:
            self._track_workers(r, r.msg.http_worker_ipcs, firsts)
        return step

    def _rows(self, msg: wire.TokenIds) -> Rows:
        """The per-row columns, each one entry per row, or FrameError."""
        rids = msg.rids or []
        n = len(rids)
        if not all(rids):
            raise FrameError("header", "empty rid", [r for r in rids if r])
        if self.max_rid_length and n and max(map(len, rids)) > self.max_rid_length:
            raise FrameError("limit_rid_length", f"rid longer than --max-rid-length "
                             f"{self.max_rid_length}",
                             [r for r in rids if len(r) <= self.max_rid_length])
        for name in wire.ROW_FIELDS:
            col = getattr(msg, name)
            if col is None or len(col) != n:
                raise FrameError("columns", f"{name} has {'nil' if col is None else len(col)} "
                                 f"entries, expected {n}", rids)
        if wire.array_length(msg.output_ids) != n:
            raise FrameError("columns", f"output_ids is not a list of {n} arrays", rids)
        ipcs = msg.http_worker_ipcs
        if ipcs is not None and len(ipcs) != n:
            raise FrameError("columns", f"http_worker_ipcs has {len(ipcs)} entries, "
                             f"expected {n}", rids)
        for name in wire.TOKEN_IDS_FIELDS[14:]:
            if name in wire.PICKLED_FIELDS:
                continue
            got = wire.array_length(getattr(msg, name))
            if got == -2:
                raise FrameError("columns", f"{name} is not a list", rids)
            if got > 0 and got != n:
                raise FrameError("columns", f"{name} has {got} entries, expected {n}", rids)
        r = Rows(msg)
        if r.finished.count(None) != n:
            for fin in filter(None.__ne__, r.finished):
                kind = fin.get("type") if isinstance(fin, dict) else None
                if not isinstance(kind, str) or kind not in FINISH_TYPES:
                    raise FrameError("finish", f"unknown finish reason {fin!r:.80}", rids)
        if min(r.read_offsets, default=0) < 0 or min(r.prompt, default=0) < 0 \
                or min(r.cached, default=0) < 0 or min(r.reasoning, default=0) < 0:
            raise FrameError("header", "a negative offset or count", rids)
        return r

    def _first_rows(self, r: Rows, ids: list[bytes], firsts: list[int],
                    owner: list[int | None],
                    out: tuple[list[Open], list[str], list[str]]) -> None:
        """Rows of rids the router does not route: a first row's options and prompt context
        (its ids before `read_offsets[i]`, cut from `ids`), or a late or lost row."""
        opens, fresh, lost = out
        for i in firsts:
            rid, at = r.rids[i], r.read_offsets[i]
            count = len(ids[i]) >> 3
            if r.completion[i] != count - at:  # not the request's first row
                if owner[i] is None:
                    lost.append(rid)
                continue  # else a late row of an ended request
            prompt = memoryview(ids[i][:8 * at]).cast("q").tolist() if at else []
            ids[i] = ids[i][8 * at:]
            skip, no_trim, spaces = r.skip[i], r.no_stop_trim[i], r.spaces[i]
            if prompt or not skip or no_trim or not spaces or owner[i] == LATE:
                opens.append(Open(rid, skip_special_tokens=skip,
                                  spaces_between_special_tokens=spaces, no_stop_trim=no_trim,
                                  prompt_ids=prompt))
            else:
                fresh.append(rid)

    def _track_workers(self, r: Rows, ipcs: list[str | None], firsts: list[int]) -> None:
        """Remember each live request's tokenizer worker, for the egress's own last rows."""
        ipc_of = self.replies.ipc_of
        for i in firsts:
            ipc = ipcs[i]
            if ipc is not None:
                ipc_of[r.rids[i]] = ipc
        fins = r.finished
        if fins.count(None) != len(fins):
            for i, fin in enumerate(fins):
                if fin is not None:
                    ipc_of.pop(r.rids[i], None)

    @staticmethod
    def _columns(msg: wire.TokenIds) -> list[Any]:
        cols: list[Any] = []
        for name in wire.PASSED_FIELDS:
            val = getattr(msg, name)
            if name in _B64_FIELDS:
                val = wire.b64_tensors(val)
            cols.append(val)
        return cols


def _for_shard(fin: dict[str, Any] | None) -> dict[str, Any] | None:
    """The finish the shard trims by: SGLang leaves a stop token out only when `matched`
    is one id (a list of them is not trimmed); the reply carries the scheduler's own."""
    if fin is None or "matched" not in fin or not isinstance(fin["matched"], list):
        return fin
    return {k: v for k, v in fin.items() if k != "matched"}


def _readable_rids(frame: bytes | memoryview) -> list[str]:
    """The rids of a message that failed validation, when its second field still reads."""
    try:
        fields = wire.rows_of(Raw(bytes(frame)))
        rids = msgspec.msgpack.decode(fields[1]) if len(fields) > 1 else []
    except (msgspec.DecodeError, ValueError, RecursionError):
        return []
    if not isinstance(rids, list):
        return []
    return [r for r in rids if isinstance(r, str) and r]
