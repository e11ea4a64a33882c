"""`BatchStrOutput` replies: a shard's decoded rows joined to the scheduler's own fields,
and the service's own last rows (a dead shard's requests, a dropped message's).

The egress hands each shard, beside its rows' ids, the fields SGLang's detokenizer passes
through, already cut to that shard's rows (`Passed`): this module only puts the shard's
texts among them. With tokenizer workers (`http_worker_ipcs` set), rows are grouped by
their worker's endpoint, one reply per worker, as SGLang's detokenizer sends them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from msgspec import Raw

from sglang_tok.protocol import Delta, Packed

from . import wire

# an abort the TokenizerManager turns into an error response (5xx: it may be retried)
SERVICE_UNAVAILABLE = 503
Reply = tuple[str | None, bytes]  # (tokenizer worker endpoint, or None: --output; message)


class Passed(msgspec.Struct, array_like=True, gc=False):
    """One shard's rows of a scheduler message: the columns SGLang passes through, in
    `wire.PASSED_FIELDS` order, each a per-row list (or nil) of this shard's rows."""

    ipcs: list[str | None] | None
    columns: list[Raw]


_passed_decoder = msgspec.msgpack.Decoder(Passed)
_rids_decoder = msgspec.msgpack.Decoder(list[str])
_encoder = msgspec.msgpack.Encoder()
_OUT_AT = {name: i for i, name in enumerate(wire.STR_FIELDS)}
_PASSED_AT = [(_OUT_AT[name], i) for i, name in enumerate(wire.PASSED_FIELDS)]
_TEXTS_AT = _OUT_AT["output_strs"]
# columns that are one pickle for the whole message, not a list per row
PICKLED_AT = frozenset(i for i, name in enumerate(wire.PASSED_FIELDS)
                       if name in wire.PICKLED_FIELDS)


def encode_passed(ipcs: list[str | None] | None, columns: Sequence[Any]) -> bytes:
    return _encoder.encode(Passed(ipcs, list(columns)))


def abort_finish(message: str) -> dict[str, Any]:
    return {"type": "abort", "message": message, "status_code": SERVICE_UNAVAILABLE,
            "err_type": None}


def _message(columns: list[Any]) -> bytes:
    return wire.encode_message(wire.STR_OUTPUT, columns)


def pick_rows(columns: list[Raw], rows: list[int]) -> list[Raw]:
    """Some rows of the passed-through columns. A pickle (`time_stats`, `customized_info`)
    holds every row and cannot be cut without unpickling it: a part gets nil."""
    return [wire.NIL if i in PICKLED_AT else _pick(c, rows) for i, c in enumerate(columns)]


def _pick(col: Raw, rows: list[int]) -> Raw:
    if wire.array_length(col) < 1:  # nil, or [] (absent for every row)
        return col
    vals = wire.rows_of(col)
    return Raw(_encoder.encode([vals[r] for r in rows]))


class Replies:
    """Writes one shard's (or the egress's) output in SGLang's form."""

    __slots__ = ("ipc_of",)

    def __init__(self) -> None:
        # the tokenizer worker of each live request that has one (failures find it here)
        self.ipc_of: dict[str, str] = {}

    # ------------------------------------------------------------------ decoded rows
    def rows(self, packed: Packed, extra: bytes) -> list[Reply]:
        """Replies for one ARRAYS message: the decoded rows, in the scheduler's row order,
        with its passed-through fields; a row the shard ended with an error of its own, or
        a delta without a row, is a last row of the service's."""
        passed = _passed_decoder.decode(extra)
        rids = _rids_decoder.decode(passed.columns[0])
        out_rids = packed.rids
        texts = packed.texts()
        if out_rids == rids and not packed.error:  # one delta per row, in row order
            return self._split(passed, texts, rids)
        return self._matched(packed, passed, texts, rids)

    def _matched(self, packed: Packed, passed: Passed, texts: list[str],
                 rids: list[str]) -> list[Reply]:
        """The general join: each row takes its rid's next delta, in order."""
        failed = {packed.rids[r]: err for r, err in packed.error}
        queues: dict[str, list[int]] = {}
        for r, rid in enumerate(packed.rids):
            if rid not in failed:
                queues.setdefault(rid, []).append(r)
        keep: list[int] = []
        strs: list[str] = []
        for i, rid in enumerate(rids):
            q = queues.get(rid)
            if q:
                keep.append(i)
                strs.append(texts[q.pop(0)])
        out: list[Reply] = []
        if keep:
            if len(keep) != len(rids):
                passed = Passed(None if passed.ipcs is None else [passed.ipcs[i] for i in keep],
                                pick_rows(passed.columns, keep))
            out += self._split(passed, strs, [rids[i] for i in keep])
        extra = [d for d in packed.deltas if d.rid in failed or (d.rid in queues
                                                                  and queues[d.rid])]
        return out + self.last_rows(extra)

    def _split(self, passed: Passed, texts: list[str], rids: list[str]) -> list[Reply]:
        """One reply, or one per tokenizer worker when the rows name several."""
        ipcs = passed.ipcs
        if ipcs is None or ipcs.count(None) == len(ipcs):
            return [(None, self._build(passed.columns, texts))]
        self._remember(rids, ipcs, passed.columns)
        groups: dict[str | None, list[int]] = {}
        for i, ipc in enumerate(ipcs):
            groups.setdefault(ipc, []).append(i)
        if len(groups) == 1:
            return [(ipcs[0], self._build(passed.columns, texts))]
        return [(ipc, self._build(pick_rows(passed.columns, rows), [texts[i] for i in rows]))
                for ipc, rows in groups.items()]

    def _remember(self, rids: list[str], ipcs: list[str | None], columns: list[Raw]) -> None:
        """Keep each request's worker while it lives, for a last row of the service's."""
        finished = msgspec.msgpack.decode(columns[wire.PASSED_FIELDS.index("finished_reasons")])
        for rid, ipc, fin in zip(rids, ipcs, finished):
            if fin is not None:
                self.ipc_of.pop(rid, None)
            elif ipc is not None:
                self.ipc_of[rid] = ipc

    @staticmethod
    def _build(columns: list[Raw], texts: list[str]) -> bytes:
        fields: list[Any] = [None] * len(wire.STR_FIELDS)
        for at, i in _PASSED_AT:
            fields[at] = columns[i]
        fields[_TEXTS_AT] = texts
        return _message(fields)

    # ------------------------------------------------------------------ own last rows
    def last_rows(self, deltas: Sequence[Delta]) -> list[Reply]:
        """The service's own rows (terminal errors, a failed request's flushed text) as
        SGLang rows: an abort finish with the error, usage from the delta."""
        groups: dict[str | None, list[Delta]] = {}
        for d in deltas:
            groups.setdefault(self.ipc_of.pop(d.rid, None) if d.finish else
                              self.ipc_of.get(d.rid), []).append(d)
        return [(ipc, _own_rows(ds, ipc)) for ipc, ds in groups.items()]


def _own_rows(deltas: list[Delta], ipc: str | None) -> bytes:
    n = len(deltas)
    fields: list[Any] = [None] * len(wire.STR_FIELDS)
    usage = [d.usage for d in deltas]

    def counts(get: Callable[[Any], int]) -> list[int]:
        return [get(u) if u is not None else 0 for u in usage]

    fields[_OUT_AT["rids"]] = [d.rid for d in deltas]
    fields[_OUT_AT["http_worker_ipcs"]] = None if ipc is None else [ipc] * n
    fields[_OUT_AT["finished_reasons"]] = [
        (abort_finish(d.error) if d.error is not None else d.finish) if d.finish else None
        for d in deltas]
    fields[_TEXTS_AT] = [d.text for d in deltas]
    fields[_OUT_AT["output_ids"]] = [wire.array_ext(d.ids) for d in deltas]
    fields[_OUT_AT["prompt_tokens"]] = counts(lambda u: u.prompt_tokens)
    fields[_OUT_AT["completion_tokens"]] = counts(lambda u: u.completion_tokens)
    fields[_OUT_AT["reasoning_tokens"]] = counts(lambda u: u.reasoning_tokens)
    fields[_OUT_AT["cached_tokens"]] = counts(lambda u: u.cached_tokens)
    fields[_OUT_AT["retraction_counts"]] = [0] * n
    return _message(fields)


def by_worker(msg: bytes, ipcs: list[str | None] | None) -> list[Reply]:
    """A message passed on as it came (`BatchEmbeddingOutput`), to each row's tokenizer
    worker: whole when its rows name one, else cut per worker, each per-row field to the
    worker's rows (a pickle, or a field that is not one entry per row, is nil in a part)."""
    if not ipcs or len(set(ipcs)) == 1:
        return [(ipcs[0] if ipcs else None, msg)]
    fields = wire.rows_of(Raw(msg))
    n = len(ipcs)
    groups: dict[str | None, list[int]] = {}
    for i, ipc in enumerate(ipcs):
        groups.setdefault(ipc, []).append(i)
    out: list[Reply] = []
    for ipc, rows in groups.items():
        part = [fields[0]]
        for f in fields[1:]:
            count = wire.array_length(f)
            part.append(f if count < 1 else _pick(f, rows) if count == n else wire.NIL)
        out.append((ipc, _encoder.encode(part)))
    return out
