"""What a reply carries of its scheduler message: the fields SGLang's detokenizer passes on
to the TokenizerManager, cut into each shard's `Part` (part.py) as byte ranges.

The egress reads a message once (`reader.py`) and hands this object on with its rows; the
cut waits until the egress knows where the rows go (`parts`): a message whose rows all go
to one shard and one tokenizer worker (SGLang's default server: one detokenizer, one
tokenizer process) passes every field as it came, and only a message cut into several
parts has its columns located (`spans.locate`).

SGLang's pickled columns are cut by their items (`pickle_rows.py`), which unpickles
nothing, from any peer. One of another shape (`customized_info`, a map of per-row lists;
time stats whose items differ in size) is cut by unpickling, only from SGLang's own
process tree (`pickled.cut_rows`); from another peer a part carries it as nil.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from msgspec import Raw

from . import wire
from .part import AS_IS, NIL, PICKLED, WORKER, Columns, Part, encode_part, packed, whole
from .pickled import cut_rows
from .positions import Positions
from .spans import Column, Cut, Locator, ext_sizes, locate_items, str_sizes

I64 = npt.NDArray[np.int64]


class Carried:
    """One message's carried fields (the positions' `carried` order), ready to cut. `keys`: each
    row's tokenizer worker as an index of `names` where the rows name several (None: one
    or none); `rids` and `counts` (each row's output ids) size the columns they match."""

    __slots__ = ("positions", "locate", "fields", "n", "rids", "counts", "names", "keys", "flags",
                 "per_row", "ids_ext", "decoded")

    def __init__(self, positions: Positions, locate: Locator, fields: list[Raw], rids: list[str],
                 counts: list[int], names: list[str | None] | None, keys: I64 | None,
                 flags: list[int], per_row: bool, ids_ext: bool,
                 decoded: dict[str, Any] | None = None) -> None:
        self.positions = positions
        self.locate = locate  # the reader's: it knows the last message's columns
        self.decoded = decoded or {}  # the columns the reader decoded, by name
        self.fields = fields
        self.n = len(rids)
        self.rids = rids
        self.counts = counts
        self.names = names  # None: the message has no ipcs column
        self.keys = keys
        self.flags = flags
        self.per_row = per_row  # SGLang's own process tree: pickles may be unpickled
        self.ids_ext = ids_ext  # output_ids are `array("q")` exts (their sizes known)

    def whole(self, inline: bool = False) -> Part | bytes:
        """Every row, to one shard, of one tokenizer worker: the fields as they came
        (packed, unless for a shard in the egress's process)."""
        names = self.names
        part = whole(self.fields, self.n, names[0] if names else None, names is not None,
                     self.flags)
        return part if inline else encode_part(part)

    def parts(self, order: I64, first: I64, shards: list[int], keys: I64 | None,
              inline: bool = False) -> dict[int, Any]:
        """Each shard's part (egress/split.py's order: rows by shard, then by worker),
        packed unless for a shard in the egress's process. A message whose rows all go to
        one shard and one worker is that shard's whole."""
        if len(shards) == 1 and keys is None and int(first[len(first) - 2]) == self.n:
            return {shards[0]: self.whole(inline)}
        return self.cut(order, first, shards, keys) if inline else \
            {s: encode_part(p) for s, p in self.cut(order, first, shards, keys).items()}

    def cut(self, order: I64, first: I64, shards: list[int],
            keys: I64 | None) -> dict[int, Part]:
        positions = self.positions
        columns: list[Column] = []
        pickled: list[int] = []
        locate, n, pickles = self.locate, self.n, positions.pickled_carried
        workers = positions.carried.index("http_worker_ipcs") if keys is not None else -1
        for k, field in enumerate(self.fields):
            if k == workers:  # rows of several workers: a group's rows name its own
                col = _WORKER
            elif k in pickles:
                col = self._pickled(field)
                if col.kind == PICKLED:
                    pickled.append(k)
            else:
                col = locate(k, field, n, lambda: self._sizes(k),  # noqa: B023
                             self._numbers(k))
            columns.append(col)
        parts = Cut(columns, self.names, self.flags).parts(order, first, shards, keys)
        if pickled:  # the unpickling cut: each part's rows of the column, pickled
            rows = {s: order[int(first[s]):int(first[s + 1])].tolist() for s in shards}
            for k in pickled:
                got = cut_rows(self.fields[k], [rows[s] for s in shards]) \
                    if self.per_row else None
                for j, s in enumerate(shards):
                    part = parts[s]
                    shape = part.shape
                    values = list(shape.values)
                    values[k] = NIL if got is None else got[j]
                    part.columns = packed(Columns(shape.kinds, values, shape.widths))
        return parts

    def _pickled(self, field: Raw) -> Column:
        if field == wire.NIL:
            return Column(AS_IS, NIL)
        col = locate_items(field, self.n)
        return col if col is not None else Column(PICKLED, NIL)

    def _numbers(self, k: int) -> Any:
        """Carried column k's values, where it is a column of ints the reader decoded."""
        name = self.positions.carried[k]
        return self.decoded.get(name) if name in _INT_COLUMNS else None

    def _sizes(self, k: int) -> tuple[I64, bool] | None:
        """Each row's size in carried column k where it is known beforehand, and whether it
        is a lower bound of each (read from the column's own values) or a guess."""
        name = self.positions.carried[k]
        if name == "rids":
            return str_sizes(self.rids), True
        if name == "output_ids" and self.ids_ext:
            return ext_sizes(self.counts), False  # the counts are decode_ids'
        return None


_WORKER = Column(WORKER, b"")
# the carried columns of ints the reader may have decoded (their sizes follow from them)
_INT_COLUMNS = frozenset(("prompt_tokens", "cached_tokens", "completion_tokens",
                          "reasoning_tokens"))
