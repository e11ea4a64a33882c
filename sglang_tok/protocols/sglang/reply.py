"""`BatchStrOutput` replies: a shard's decoded rows joined to the scheduler's own fields,
and the service's own last rows (a dead shard's requests, a dropped message's).

The egress hands each shard, beside its rows' ids, the fields SGLang's detokenizer passes
through, already cut to that shard's rows as byte ranges and grouped by tokenizer worker
(`part.Part`): this module only puts the shard's texts among them, one reply per worker as
SGLang's detokenizer sends them. A reply is its fields' bytes laid end to end (`Shape`):
what is the same for every group of a part is joined once, and a group's own fields are a
header and one slice each. Where each reply field comes from is the running release's
(`positions.Positions`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from msgspec import Raw

from sglang_tok.finish import Abort
from sglang_tok.protocols.model.columns import ColumnsOut
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.protocols.sglang import wire

from .part import AS_IS, SAME, Fields, Part, array_head, part_decoder
from .pickled import cut_rows
from .positions import STR_OUTPUT, Positions
from .workers import WorkerMap

log = logging.getLogger("sglang_tok.sglang")
# an abort the TokenizerManager turns into an error response (5xx: it may be retried)
SERVICE_UNAVAILABLE = 503
Reply = tuple[str | None, bytes]  # (tokenizer worker endpoint, or None: --output; message)


SKIP, SPACES, NO_TRIM = 1, 2, 4  # a row's options in `Part.flags`


def beam_flags(skip: Sequence[bool], spaces: Sequence[bool], no_trim: Sequence[bool]
               ) -> list[int]:
    return [SKIP * a | SPACES * b | NO_TRIM * c for a, b, c in zip(skip, spaces, no_trim)]


class BeamTexts:
    """SGLang's `decode_beam_search_output`: each returned sequence's `text` is the full
    decode of its tokens, a matched stop token trimmed by the sequence's own finish (a
    group's sequences end differently) unless the row keeps it, with the row's options."""

    def __init__(self, decode: Callable[[list[int], bool, bool], str],
                 keep: frozenset[int] = frozenset()) -> None:
        self.decode = decode
        self.keep = keep

    def fill(self, raw: Raw, flags: Sequence[int], sequences_at: int) -> Raw:
        """Each row's `BeamSearchOutput` (its fields at the release's positions; the
        sequences, msgpack maps, keep every key they came with) with the texts filled in."""
        rows = wire.rows_of(raw)
        out: list[Raw] = []
        for row, f in zip(rows, flags):
            if row == wire.NIL or not sequences_at:
                out.append(row)
                continue
            fields = wire.rows_of(row)
            seqs = _sequences.decode(fields[sequences_at])
            for seq in seqs:
                ids = seq.get("tokens") or []
                fin = seq.get("finish_reason")
                matched = fin.get("matched") if isinstance(fin, dict) else None
                if type(matched) is int and ids and not f & NO_TRIM \
                        and ids[-1] not in self.keep:
                    ids = ids[:-1]
                _set_text(seq, self.decode(ids, bool(f & SKIP), bool(f & SPACES)))
            fields[sequences_at] = Raw(_encoder.encode(seqs))
            out.append(Raw(_encoder.encode(fields)))
        return Raw(_encoder.encode(out))


_sequences = msgspec.msgpack.Decoder(list[dict[str, Any]])
# SGLang's BeamSearchSequence declares text after these (msgspec writes a struct's keys in
# declaration order): a sequence written without its text gets it back in that place
_BEFORE_TEXT = ("tokens", "cum_logprob", "finish_reason")


def _set_text(seq: dict[str, Any], text: str) -> None:
    if "text" in seq:
        seq["text"] = text
        return
    rest = {k: seq.pop(k) for k in list(seq) if k not in _BEFORE_TEXT}
    seq["text"] = text
    seq.update(rest)


_encoder = msgspec.msgpack.Encoder()


def cut(columns: Sequence[Any], n: int, parts: list[list[int]],
        whole: frozenset[int]) -> list[list[Raw]]:
    """Each part's rows of every column of a message passed on whole (a
    `BatchEmbeddingOutput`, cut per tokenizer worker: rare, so by rows): a list of n
    entries is cut to the part's rows; nil and `[]` (absent for every row) go as they are;
    a column in `whole` (a pickle of every row, which the service never unpickles), or one
    that is not an entry per row, is nil in a part."""
    out: list[list[Raw]] = [[] for _ in parts]
    for i, col in enumerate(columns):
        cells: list[Any] | None = None
        value = wire.NIL
        if isinstance(col, list):  # a column the egress decoded (validated: n entries)
            cells = col if i not in whole and len(col) == n else None
        elif col is not None and i not in whole and not wire.is_wrapped(col):
            count = wire.array_length(col)
            if count == n and n:
                cells = wire.rows_of(col)
            elif count in (-1, 0):
                value = col
        for part, rows in zip(out, parts):
            part.append(value if cells is None else
                        Raw(_encoder.encode(list(map(cells.__getitem__, rows)))))
    return out


_strs = msgspec.msgpack.Decoder(list[str])
TEXTS = -1  # where a reply's texts go among a `Shape`'s pieces


class Shape:
    """A `BatchStrOutput` of one part's kinds, as pieces laid end to end: the bytes every
    group of the part shares (the array header, the tag, the fixed fields, the AS_IS
    columns, and for a group of k rows the SAME ones: runs of them joined once per k), and
    where a group's own go (a carried column's index, or TEXTS)."""

    __slots__ = ("items", "by_rows")

    def __init__(self, positions: Positions, kinds: bytes, values: Sequence[bytes]) -> None:
        from_carried = dict(positions.from_carried)
        # each field: bytes (every group's), (SAME's one row's value,), or where it comes from
        items: list[bytes | tuple[bytes] | int] = [array_head(positions.out_count + 1),
                                                    _encoder.encode(STR_OUTPUT)]
        for at in range(positions.out_count):
            k = from_carried.get(at)
            if k is not None and kinds[k] == AS_IS:
                items.append(values[k])
            elif k is not None and kinds[k] == SAME:
                items.append((values[k],))
            elif k is None and at != positions.texts_at:
                fixed = positions.fixed[at]
                items.append(b"\xc0" if fixed is None else bytes(fixed))
            else:
                items.append(TEXTS if k is None else k)
        self.items = items
        self.by_rows: dict[int, list[bytes | int]] = {}  # group size -> its pieces

    def pieces(self, rows: int) -> list[bytes | int]:
        """The pieces of a reply of `rows` rows: every run of shared bytes joined."""
        got = self.by_rows.get(rows)
        if got is None:
            got, run = [], []
            head = array_head(rows)
            for item in self.items:
                if isinstance(item, bytes):
                    run.append(item)
                elif isinstance(item, tuple):
                    run.append(head + item[0] * rows)
                else:
                    if run:
                        got.append(b"".join(run))
                        run = []
                    got.append(item)
            if run:
                got.append(b"".join(run))
            if len(self.by_rows) >= 256:
                self.by_rows.clear()
            self.by_rows[rows] = got
        return got

    def build(self, fields: Fields, a: int, b: int, texts: list[str],
              ipc: str | None = None) -> bytes:
        """The reply of the part's rows [a, b) (of tokenizer worker `ipc`), with their
        texts."""
        return b"".join([p if p.__class__ is bytes else  # type: ignore[misc]
                         _encoder.encode(texts) if p == TEXTS else
                         fields.field(p, a, b, ipc)  # type: ignore[arg-type]
                         for p in self.pieces(b - a)])


class Shapes:
    """The shapes of the parts a shard has seen (a few: a part's kinds and constant
    columns change only when the scheduler's batch does)."""

    __slots__ = ("positions", "known")

    def __init__(self, positions: Positions) -> None:
        self.positions = positions
        self.known: dict[bytes, Shape] = {}

    def of(self, part: Part) -> Shape:
        if part.whole:  # a message's own fields: no other part has them
            columns = part.shape
            return Shape(self.positions, columns.kinds, columns.values)
        key = bytes(part.columns)  # one packing per message's shape: they repeat
        shape = self.known.get(key)
        if shape is None:
            if len(self.known) >= 64:
                self.known.clear()
            columns = part.shape
            shape = self.known[key] = Shape(self.positions, columns.kinds, columns.values)
        return shape


def abort_finish(message: str) -> Abort:
    return Abort(message, SERVICE_UNAVAILABLE, None)


def _groups(keys: Sequence[Any]) -> dict[Any, list[int]]:
    out: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return out


class Replies:
    """Writes one shard's (or the egress's) output in SGLang's form.

    `routed`: SGLang runs tokenizer workers (`--tokenizer-worker-num` > 1). Then
    `--output` is its router's socket, which takes only rows that name their worker, so a
    row of the service's whose worker is unknown (`workers`) is logged and dropped instead.
    """

    __slots__ = ("positions", "workers", "routed", "unroutable", "per_row", "beams", "shape")

    def __init__(self, positions: Positions, workers: WorkerMap, routed: bool = False,
                 per_row: bool = False, beams: BeamTexts | None = None) -> None:
        self.positions = positions
        # the tokenizer worker of each live request that has one (the reader's too)
        self.workers = workers
        self.routed = routed
        self.unroutable = 0
        # the messages come from SGLang's own process tree: the pickled columns may be cut
        # per row (reply.cut_pickled) when a message's rows go to several workers
        self.per_row = per_row
        self.beams = beams  # the shard's decoder for beam search sequences
        self.shape = Shapes(positions)

    # ------------------------------------------------------------------ decoded rows
    def rows(self, out: ColumnsOut, extra: bytes | Part) -> list[Reply]:
        """Replies for one ARRAYS message: the decoded rows, in the part's row order, with
        its passed-through fields; a row the shard ended with an error of its own, or a
        delta without a row, is a last row of the service's. `out` is the shard's sink as
        it stands: the texts go on as the lists the decoders made."""
        part = extra if isinstance(extra, Part) else part_decoder.decode(extra)
        errors = out.sparse.get("error")
        at = self.positions.beams
        if part.flags and self.beams is not None and at >= 0:
            part = self._beams(part, at)
        whole = part.whole
        if whole and not errors and len(out.rids) == part.count \
                and _encoder.encode(out.rids) == bytes(whole[self.positions.rids_k]):
            # the message's every row, of one worker (SGLang's default server): its fields
            # go on as they came, among them the texts
            if part.ipcs is not None:
                self._remember(part, out.rids, out)
            return [(part.ipcs[0] if part.ipcs else None,
                     wire.encode_message(STR_OUTPUT, self.positions.reply(whole, out.texts)))]
        fields = Fields(part, self._cut)
        rids_field = fields.field(self.positions.rids_k, 0, part.count)
        aligned = not errors and len(out.rids) == part.count \
            and _encoder.encode(out.rids) == rids_field  # a delta per row, in row order
        if part.ipcs is not None:
            self._remember(part, out.rids if aligned else _strs.decode(rids_field), out)
        if aligned:
            return self._split(fields, out.texts)
        return self._matched(out, part, _strs.decode(rids_field),
                             {out.rids[r] for r, _ in errors or ()})

    def _matched(self, out: ColumnsOut, part: Part, rids: list[str],
                 failed: set[str]) -> list[Reply]:
        """The general join: each row takes its rid's next delta, in order."""
        texts = out.texts
        rows_of: dict[str, list[int]] = {}
        for r, rid in enumerate(out.rids):
            rows_of.setdefault(rid, []).append(r)
        taken: dict[str, int] = {}
        keep: list[int] = []
        strs: list[str] = []
        for i, rid in enumerate(rids):
            at = taken.get(rid, 0)
            mine = rows_of.get(rid)
            if mine is not None and at < len(mine) and rid not in failed:
                taken[rid] = at + 1
                keep.append(i)
                strs.append(texts[mine[at]])
        replies: list[Reply] = []
        if keep:
            if len(keep) != len(rids):
                part = part.take(keep)
            replies += self._split(Fields(part, self._cut), strs)
        spare = [r for rid, rs in rows_of.items() for r in rs[taken.get(rid, 0):]]
        if spare:
            deltas = out.build(0, 0).deltas
            replies += self.last_rows([deltas[r] for r in sorted(spare)])
        return replies

    def _split(self, fields: Fields, texts: list[str]) -> list[Reply]:
        """One reply per group of the part's rows (one per tokenizer worker)."""
        part = fields.part
        shape = self.shape.of(part)
        ipcs = part.ipcs
        bounds = part.bounds()
        if len(bounds) == 1:
            ipc = ipcs[0] if ipcs else None
            return [(ipc, shape.build(fields, 0, part.count, texts, ipc))]
        assert ipcs is not None
        return [(ipc, shape.build(fields, a, b, texts[a:b], ipc))
                for ipc, (a, b) in zip(ipcs, bounds)]

    def _cut(self, field: bytes, parts: list[list[int]]) -> list[bytes] | None:
        """A pickled column only unpickling cuts, cut per group (SGLang's own process
        tree only; elsewhere a group carries it as nil)."""
        return cut_rows(field, parts) if self.per_row else None

    def _beams(self, part: Part, at: int) -> Part:
        """The part with each beam search sequence's text filled in."""
        assert self.beams is not None
        column = Fields(part).field(at, 0, part.count)
        filled = self.beams.fill(Raw(column), part.flags, self.positions.sequences_at)
        return part.with_rows(at, [bytes(r) for r in wire.rows_of(filled)])

    def _remember(self, part: Part, rids: list[str], out: ColumnsOut) -> None:
        """Keep each live request's worker, for a last row of the service's: its first
        row's group's; forget those whose last row this is."""
        ipc_of = self.workers.ipc_of
        assert part.ipcs is not None
        for ipc, (a, b) in zip(part.ipcs, part.bounds()):
            if ipc is not None:
                for rid in set(rids[a:b]).difference(ipc_of):
                    ipc_of[rid] = ipc
        finish = out.sparse.get("finish")
        if finish:
            self.workers.ended([out.rids[r] for r, _ in finish])

    # ------------------------------------------------------------------ own last rows
    def last_rows(self, deltas: Sequence[Delta]) -> list[Reply]:
        """The service's own rows (terminal errors, a failed request's flushed text) as
        SGLang rows: an abort finish with the error, usage from the delta."""
        groups: dict[str | None, list[Delta]] = {}
        route = self.workers.route
        for d in deltas:
            groups.setdefault(route(d.rid, d.finish is not None), []).append(d)
        lost = groups.pop(None, []) if self.routed else []
        if lost:
            self.unroutable += len(lost)
            log.warning("no tokenizer worker known for %d ended requests (e.g. %r): their "
                        "last rows are not sent (SGLang's router takes no row without one)",
                        len(lost), lost[0].rid)
        return [(ipc, self._own_rows(ds, ipc)) for ipc, ds in groups.items()]

    def _own_rows(self, deltas: list[Delta], ipc: str | None) -> bytes:
        n = len(deltas)
        usage = [d.usage for d in deltas]

        def counts(get: Callable[[Any], int]) -> list[int]:
            return [get(u) if u is not None else 0 for u in usage]

        return wire.encode_message(STR_OUTPUT, self.positions.own_reply({
            "rids": [d.rid for d in deltas],
            "http_worker_ipcs": None if ipc is None else [ipc] * n,
            "finished_reasons": [(abort_finish(d.error) if d.error is not None else d.finish)
                                 if d.finish else None for d in deltas],
            "output_strs": [d.text for d in deltas],
            "output_ids": [self.positions.array(d.ids) for d in deltas],
            "prompt_tokens": counts(lambda u: u.prompt_tokens),
            "completion_tokens": counts(lambda u: u.completion_tokens),
            "reasoning_tokens": counts(lambda u: u.reasoning_tokens),
            "cached_tokens": counts(lambda u: u.cached_tokens),
            "retraction_counts": [0] * n}))


def by_worker(msg: bytes, ipcs: list[str | None] | None, whole: frozenset[int]
              ) -> list[Reply]:
    """A message passed on as it came (`BatchEmbeddingOutput`), to each row's tokenizer
    worker: whole when its rows name one, else cut per worker (`cut`; `whole`: its
    fields that are one pickle of every row)."""
    if not ipcs or len(set(ipcs)) == 1:
        return [(ipcs[0] if ipcs else None, msg)]
    fields = wire.rows_of(Raw(msg))
    groups = _groups(ipcs)
    parts = list(groups.values())
    columns = cut(fields[1:], len(ipcs), parts, whole)
    return [(ipc, _encoder.encode([fields[0], *cols])) for ipc, cols in zip(groups, columns)]
