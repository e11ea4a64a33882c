"""A routed BATCH frame cut into one ARRAYS message per shard, as whole-column work.

The egress has decoded the header once (routing needs the rids); the shards need only
numbers. So each shard gets its rows' slots, their ids gathered from the frame's data
buffer in one fancy index, and the few facts that are not per row in the steady state:
rids taking a slot, rows ending their request, per-row id counts when some row has other
than one id, reasoning counts when some are nonzero, logprob families when present. No
shard reads another's rows, and none decodes msgpack per row.
"""

from __future__ import annotations

from array import array
from itertools import compress
from typing import Any

import numpy as np
import numpy.typing as npt

from ring import link
from ring.link import Family, Sparse
from sglang_tok.protocols.model.batch import FAMILIES, HEADER_FIELDS, Batch
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.interface import LATE, Carry
from sglang_tok.ragged import ragged_index, small_ints, starts_of, u32s

I64 = npt.NDArray[np.int64]
# the output families a shard returns (input logprobs and hidden states are not text)
_OUTPUT_FAMILIES = {name: (idx, kind) for name, idx, kind in FAMILIES
                    if name in ("output_logprobs", "output_top", "output_token_ids")}


def split_frame(stamp: float, batch: Batch, codes: list[int], nshards: int,
                new_rows: list[tuple[int, str]], carry: Carry | None = None,
                opens: dict[int, list[Open]] | None = None,
                inline: bool = False) -> list[tuple[int, Any]]:
    """(shard, ARRAYS message) for every shard that owns a row of the frame; `carry` is
    what an SGLang reply passes on, cut here into each shard's part (`Sparse.extra`),
    `opens` the shards' first rows' options (`Sparse.opens`). `inline`: the one shard
    lives in this process, and its message is the `link.Arrays` object itself (its part
    the object too).

    Rows are grouped by shard with one stable sort (and within a shard by the reply
    endpoint `carry.keys`, where the rows name several), so each shard's slots, ids and
    carried columns are slices of one gather each, whatever the number of shards.
    """
    header = batch.header
    n_rows = len(codes)
    lens = header.tok_lens
    one_each = lens.count(1) == n_rows
    fins = header.finish_reasons
    end_rows = [] if fins.count(None) == n_rows else list(compress(range(n_rows), fins))
    reasoning = np.array(header.reasoning_tokens, np.uint32) \
        if header.reasoning_tokens.count(0) != n_rows else None
    keys = carry.keys if carry is not None else None
    if nshards == 1 and keys is None and LATE not in codes:  # shard 0's, in frame order
        extra = carry.whole(inline) if carry is not None else b""
        return [_whole(stamp, batch, codes, one_each, lens, new_rows, end_rows, reasoning,
                       extra, opens[0] if opens else [], inline)]
    code = u32s(codes).astype(np.int64)
    shard_of = code % nshards
    if LATE in codes:
        shard_of[code == LATE] = nshards  # LATE rows sort last, in no shard's part
    order = np.argsort(shard_of if keys is None else shard_of * (int(keys.max()) + 1) + keys,
                       kind="stable")
    per_shard = np.bincount(shard_of, minlength=nshards + 1)
    first = starts_of(per_shard)
    pos = np.empty(n_rows, np.int64)  # frame row -> its row in its shard's message
    pos[order] = np.arange(n_rows) - first[shard_of[order]]
    slots = (code[order] // nshards).astype(np.uint32)
    ids_sorted, id_first, counts = _ids_by_shard(batch, None if one_each else lens, order,
                                                 first, shard_of, nshards)
    families = _families(batch, (order, first))
    shards_of_events = shard_of[[i for i, _ in new_rows] + end_rows].tolist() \
        if new_rows or end_rows else []
    shards = np.flatnonzero(per_shard[:nshards]).tolist()
    parts = carry.parts(order, first, shards, None if keys is None else keys[order],
                        inline) if carry is not None else None
    out: list[tuple[int, Any]] = []
    for shard in shards:
        row_from, row_to = int(first[shard]), int(first[shard + 1])
        sparse = Sparse()
        if counts is not None:
            sparse.counts = counts[row_from:row_to].astype(np.uint32).tobytes()
        if shards_of_events:
            _events(sparse, header, shard, shards_of_events, pos, new_rows, end_rows)
        if reasoning is not None:
            sparse.reasoning = reasoning[order[row_from:row_to]].tobytes()
        if families:
            sparse.families = [f.part(shard) for f in families]
        if opens and shard in opens:
            sparse.opens = opens[shard]
        shard_ids = ids_sorted[int(id_first[shard]):int(id_first[shard + 1])]
        if inline:
            out.append((shard, link.Arrays(stamp, slots[row_from:row_to], shard_ids, sparse,
                                           parts[shard] if parts else None)))
            continue
        if parts:
            sparse.extra = parts[shard]
        out.append((shard, link.arrays(stamp, slots[row_from:row_to], shard_ids, sparse)))
    return out


def _ids_by_shard(batch: Batch, lens: list[int] | None, order: I64, first: I64, shard_of: I64,
                  nshards: int) -> tuple[I64, I64, I64 | None]:
    """The frame's ids in shard order and where each shard's start; with `lens` (some row
    has other than one id), also each sorted row's count, which its shard is sent."""
    ids = np.frombuffer(batch.data, np.int64, batch.total_ids)
    if lens is None:  # one id per row: the ids go as the rows do
        return ids[order], first, None
    id_starts = starts_of(small_ints(lens))
    counts = id_starts[order + 1] - id_starts[order]
    id_first = starts_of(np.bincount(shard_of, id_starts[1:] - id_starts[:-1],
                                     minlength=nshards + 1).astype(np.int64))
    return ids[ragged_index(id_starts[order], counts)], id_first, counts


def _whole(stamp: float, batch: Batch, codes: list[int], one_each: bool, lens: list[int],
           new_rows: list[tuple[int, str]], end_rows: list[int],
           reasoning: npt.NDArray[np.uint32] | None, extra: Any,
           opens: list[Open], inline: bool = False) -> tuple[int, Any]:
    """A frame that is shard 0's whole: the frame's own ids buffer as is, slots by `array`
    (no numpy call for a small frame, whose latency is per-call overheads); with one shard
    a row's route code is its slot, so the codes go as they are. `inline`: the message
    object itself, and `extra` is the carried object, not its bytes."""
    header = batch.header
    sparse = None if one_each and not new_rows and not end_rows and reasoning is None \
        and not batch.layout and not extra and not opens else \
        _sparse_all(header, one_each, lens, new_rows, end_rows, reasoning,
                    _whole_families(batch) if batch.layout else [])
    ids = batch.data[:8 * batch.total_ids]
    if inline:
        if sparse is None:
            sparse = Sparse()
        sparse.opens = opens
        return 0, link.Arrays(stamp, np.frombuffer(array("I", codes), np.uint32),
                              np.frombuffer(ids, np.int64), sparse, extra or None)
    if sparse is not None:
        sparse.extra, sparse.opens = extra, opens
    return 0, link.frame_arrays(stamp, array("I", codes), ids, sparse)


def _sparse_all(header: Any, one_each: bool, lens: list[int], new_rows: list[tuple[int, str]],
                end_rows: list[int], reasoning: npt.NDArray[np.uint32] | None,
                families: list[Family]) -> Sparse:
    """The sparse part of a message holding every row of the frame, rows unrenumbered."""
    prompt, cached, fins = header.prompt_tokens, header.cached_tokens, header.finish_reasons
    return Sparse(
        b"" if one_each else np.array(lens, np.uint32).tobytes(),
        [(i, rid, prompt[i], cached[i]) for i, rid in new_rows],
        [(i, fins[i], prompt[i], cached[i], header.reasoning_tokens[i]) for i in end_rows],
        b"" if reasoning is None else reasoning.tobytes(),
        families)


def _whole_families(batch: Batch) -> list[Family]:
    """The output families of a frame that is one shard's whole, as they came: each
    family's section of the data buffer is its values then its ids, of equal size (the
    next section's offset tells it without summing the lengths again). The sections go
    as views of the frame (the message's encoder copies them once)."""
    h, data, layout = batch.header, batch.data, batch.layout
    out: list[Family] = []
    ends = [f[3] for f in layout[1:]]
    ends.append(len(data))
    for (name, idx, kind, pos), end in zip(layout, ends):
        if name not in _OUTPUT_FAMILIES:
            continue
        mid = (pos + end) >> 1
        out.append((name, b"", array("I", getattr(h, HEADER_FIELDS[idx])).tobytes(),
                    array("I", getattr(h, HEADER_FIELDS[idx + 1])).tobytes()
                    if kind == "ragged" else b"",
                    data[pos:mid], data[mid:end]))  # type: ignore[arg-type]
    return out


def _events(sparse: Sparse, header: Any, shard: int, owners: list[int], pos: I64,
            new_rows: list[tuple[int, str]], end_rows: list[int]) -> None:
    """The rows of `shard` that give a rid its slot or end it, renumbered as its rows."""
    prompt, cached, reasoning, fins = (header.prompt_tokens, header.cached_tokens,
                                       header.reasoning_tokens, header.finish_reasons)
    n_new = len(new_rows)
    sparse.new = [(int(pos[i]), rid, prompt[i], cached[i])
                  for j, (i, rid) in enumerate(new_rows) if owners[j] == shard]
    sparse.ends = [(int(pos[i]), fins[i], prompt[i], cached[i], reasoning[i])
                   for j, i in enumerate(end_rows, n_new) if owners[j] == shard]


class _Family:
    """A logprob family of a frame: per row its length (and, ragged, each position's k),
    and where the values are; cut per shard only when the frame is shared."""

    __slots__ = ("name", "ragged", "col", "poslens", "data", "pos", "split", "_cut")

    def __init__(self, batch: Batch, name: str, idx: int, ragged: bool, pos: int,
                 split: tuple[I64, I64]) -> None:
        h = batch.header
        self.col: list[int] = getattr(h, HEADER_FIELDS[idx])  # per row: values or positions
        self.poslens: list[int] = getattr(h, HEADER_FIELDS[idx + 1]) if ragged else []
        self.name, self.ragged, self.split = name, ragged, split
        self.data, self.pos = batch.data, pos
        self._cut: tuple[Any, ...] | None = None  # what every shard's part is cut from

    def part(self, k: int) -> Family:
        """Shard k's share: its rows' lengths in its message's order, and their positions'
        and values' runs, which the frame's one sort by shard made contiguous (a frame that
        is one shard's whole goes as it came: `_whole_families`)."""
        if self._cut is None:
            self._cut = self._sorted()
        lens, row_first, poslens, pos_first, values, ids, value_first = self._cut
        a, b = int(row_first[k]), int(row_first[k + 1])
        p0, p1 = int(pos_first[a]), int(pos_first[b])
        v0, v1 = (int(value_first[p0]), int(value_first[p1])) if self.ragged else (p0, p1)
        return (self.name, b"", lens[a:b].tobytes(), poslens[p0:p1].tobytes(),
                values[v0:v1].tobytes(), ids[v0:v1].tobytes())

    def _sorted(self) -> tuple[Any, ...]:
        """The family reordered by shard with the frame's `order`, once for all shards:
        per row (sorted) its length, positions and values as runs, and where each starts."""
        order, row_first = self.split
        col, data, pos = small_ints(self.col), self.data, self.pos
        lens = col[order]
        if self.ragged:
            poslens_all = small_ints(self.poslens)
            positions = ragged_index(starts_of(col)[order], lens)
            poslens = poslens_all[positions]
            take = ragged_index(starts_of(poslens_all)[positions], poslens)
            pos_first = starts_of(lens)  # positions before each sorted row
            value_first = starts_of(poslens)  # values before each sorted position
        else:
            poslens = np.zeros(0, np.int64)
            take = ragged_index(starts_of(col)[order], lens)
            pos_first = starts_of(lens)  # flat: a row's "positions" are its values
            value_first = None
        total = sum(self.poslens) if self.ragged else int(col.sum())
        values = np.frombuffer(data, np.float32, total, pos)[take]
        ids = np.frombuffer(data, np.int32, total, pos + 4 * total)[take]
        return (lens.astype(np.uint32), row_first, poslens.astype(np.uint32), pos_first,
                values, ids, value_first)


def _families(batch: Batch, split: tuple[I64, I64]) -> list[_Family]:
    if not batch.layout:
        return []
    return [_Family(batch, name, idx, kind == "ragged", pos, split)
            for name, idx, kind, pos in batch.layout if name in _OUTPUT_FAMILIES]
