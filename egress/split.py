"""A routed BATCH frame cut into one ARRAYS message per shard, as whole-column work.

The egress has decoded the header once (routing needs the rids); the shards need only
numbers. So each shard gets its rows' slots, their ids gathered from the frame's data
buffer in one fancy index, and the few facts that are not per row in the steady state:
rids taking a slot, rows ending their request, per-row id counts when some row has other
than one id, reasoning counts when some are nonzero, logprob families when present. No
shard reads another's rows, and none decodes msgpack per row.
"""

from __future__ import annotations

from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt
from sglang_tok.ring import link
from sglang_tok.ring.link import LATE, SLOT_BITS, Family, Sparse

from sglang_tok.protocol import FAMILIES, HEADER_FIELDS, Batch
from sglang_tok.ragged import ragged_index, starts_of

I64 = npt.NDArray[np.int64]
SHARD_MASK = (1 << SLOT_BITS) - 1
# the output families a shard returns (input logprobs and hidden states are not text)
_OUTPUT_FAMILIES = {name: (idx, kind) for name, idx, kind in FAMILIES
                    if name in ("output_logprobs", "output_top", "output_token_ids")}


def split_frame(stamp: float, batch: Batch, codes: list[int], nshards: int,
                new_rows: list[tuple[int, str]]) -> list[tuple[int, bytes]]:
    """(shard, ARRAYS message) for every shard that owns a row of the frame."""
    h = batch.header
    n = len(codes)
    code = np.array(codes, np.int64)
    shard_of = code & SHARD_MASK
    ids = np.frombuffer(batch.data, np.int64, batch.total_ids)
    lens = h.tok_lens
    one_each = lens.count(1) == n
    id_starts = None if one_each else starts_of(np.array(lens, np.int64))
    fins = h.finish_reasons
    end_rows = [] if fins.count(None) == n else list(compress(range(n), fins))
    reasoning = np.array(h.reasoning_tokens, np.uint32) if any(h.reasoning_tokens) else None
    families = _families(batch)
    parts: list[tuple[int, I64 | None]]
    if nshards == 1 and LATE not in codes:
        parts = [(0, None)]
    else:
        per_shard = np.bincount(shard_of, minlength=SHARD_MASK + 1)
        parts = [(int(k), np.flatnonzero(shard_of == k))
                 for k in np.flatnonzero(per_shard[:nshards])]
    out: list[tuple[int, bytes]] = []
    for k, rows in parts:
        sparse = Sparse()
        if rows is None:  # every row of the frame is this shard's
            slots, ids_k = code >> SLOT_BITS, ids
            if not one_each:
                sparse.counts = np.array(lens, np.uint32).tobytes()
            pos = None
        else:
            slots = code[rows] >> SLOT_BITS
            if one_each:
                ids_k = ids[rows]
            else:
                assert id_starts is not None
                counts = id_starts[rows + 1] - id_starts[rows]
                ids_k = ids[ragged_index(id_starts[rows], counts)]
                sparse.counts = counts.astype(np.uint32).tobytes()
            pos = np.full(n, -1, np.int64)
            pos[rows] = np.arange(len(rows))
        if new_rows or end_rows:
            _events(sparse, h, int(k), shard_of, pos, new_rows, end_rows)
        if reasoning is not None:
            sparse.reasoning = (reasoning if rows is None else reasoning[rows]).tobytes()
        if families:
            sparse.families = [_gather_family(f, rows) for f in families]
        out.append((int(k), link.arrays(stamp, slots.astype(np.uint32), ids_k, sparse)))
    return out


def _events(sparse: Sparse, h: Any, k: int, shard_of: I64, pos: I64 | None,
            new_rows: list[tuple[int, str]], end_rows: list[int]) -> None:
    """The rows of shard k that give a rid its slot or end it, renumbered as its rows."""
    prompt, cached, reasoning, fins = (h.prompt_tokens, h.cached_tokens, h.reasoning_tokens,
                                       h.finish_reasons)
    mine = [i for i, _ in new_rows] + end_rows
    owners = shard_of[mine].tolist() if mine else []
    where = pos[mine].tolist() if pos is not None and mine else mine
    n_new = len(new_rows)
    sparse.new = [(where[j], rid, prompt[i], cached[i])
                  for j, (i, rid) in enumerate(new_rows) if owners[j] == k]
    sparse.ends = [(where[j], fins[i], prompt[i], cached[i], reasoning[i])
                   for j, i in enumerate(end_rows, n_new) if owners[j] == k]


class _Family:
    """A logprob family of the whole frame, as arrays (built once per frame)."""

    __slots__ = ("name", "ragged", "lens", "poslens", "values", "ids", "row_starts",
                 "pos_starts")

    def __init__(self, batch: Batch, name: str, idx: int, ragged: bool) -> None:
        fam = batch.family(name)
        assert fam is not None and fam.ids is not None
        h = batch.header
        self.name, self.ragged = name, ragged
        self.lens = np.array(getattr(h, HEADER_FIELDS[idx]), np.int64)
        self.poslens = np.array(fam.poslens, np.int64) if ragged else np.zeros(0, np.int64)
        total = fam.values.row_starts[-1]
        self.values = np.frombuffer(batch.data, np.float32, total, fam.values.start)
        self.ids = np.frombuffer(batch.data, np.int32, total, fam.ids.start)
        self.pos_starts = starts_of(self.lens)  # ragged: positions before each row
        # values before each row (flat), or before each position (ragged)
        self.row_starts = starts_of(self.poslens if ragged else self.lens)


def _families(batch: Batch) -> list[_Family]:
    if not batch.layout:
        return []
    return [_Family(batch, name, idx, kind == "ragged") for name, idx, kind, _ in batch.layout
            if name in _OUTPUT_FAMILIES]


def _gather_family(f: _Family, rows: I64 | None) -> Family:
    if rows is None:
        return Family(f.name, f.lens.astype(np.uint32).tobytes(),
                      f.poslens.astype(np.uint32).tobytes(), f.values.tobytes(),
                      f.ids.tobytes())
    lens = f.lens[rows]
    if f.ragged:
        positions = ragged_index(f.pos_starts[rows], lens)
        poslens = f.poslens[positions]
        take = ragged_index(f.row_starts[positions], poslens)
    else:
        poslens = np.zeros(0, np.int64)
        take = ragged_index(f.row_starts[rows], lens)
    return Family(f.name, lens.astype(np.uint32).tobytes(), poslens.astype(np.uint32).tobytes(),
                  f.values[take].tobytes(), f.ids[take].tobytes())


class LocalRoute:
    """The egress's routing of BATCH frames without its process, for tests and benchmarks
    that drive a shard's table in-process: the same Router and the same split."""

    def __init__(self, nshards: int = 1) -> None:
        from .router import Router  # the router imports the link; keep this module light

        self.router = Router(nshards)

    def __call__(self, batch: Batch, stamp: float = 0.0) -> dict[int, bytes]:
        router = self.router
        codes, _, _ = router.route(batch)
        new_rows, router.new_rows = router.new_rows, []
        router.opened = []
        if codes.count(LATE) == len(codes):
            return {}
        return dict(split_frame(stamp, batch, codes, router.nshards, new_rows))

    def open(self, rid: str) -> int:
        return self.router.open(rid)

    def end(self, rid: str) -> None:
        """ERROR, ABORT or DROP of a rid (the message then goes to its shard)."""
        self.router.end(rid)

    def self_ended(self, shard: int, rids: list[str]) -> None:
        self.router.self_ended(shard, rids)

    def feed(self, frame: bytes | memoryview, tables: Any, sinks: Any) -> None:
        """One input frame, any tag, through routing to the shards' tables (`tables[k]`,
        output into `sinks[k]`), as the egress and the shards' loops would do it."""
        from sglang_tok import protocol

        if frame[0] == protocol.TAG_BATCH:
            for k, msg in self(protocol.decode_batch(frame)).items():
                parsed = link.parse(msg)
                assert isinstance(parsed, link.Arrays)
                tables[k].on_arrays(parsed, sinks[k])
        else:
            ctl = protocol.decode_control(frame)
            router = self.router
            match ctl:
                case protocol.Open(rid=rid):
                    k = router.open(rid)
                    tables[k].on_open(ctl, sinks[k])
                case protocol.Error(rid=rid):
                    k = router.owner(rid)
                    router.end(rid)
                    tables[k].on_error(ctl, sinks[k])
                case protocol.Abort(rids=rids):
                    for rid in rids:
                        k = router.owner(rid)
                        router.end(rid)
                        tables[k].on_abort(protocol.Abort([rid]), sinks[k])
                case protocol.Result(rid=rid):
                    k = router.owner(rid)
                    tables[k].on_result(ctl, sinks[k])
        for k in range(self.router.nshards):
            if k < len(tables) and tables[k].self_ended:
                self.router.self_ended(k, tables[k].self_ended)
                tables[k].self_ended = []
