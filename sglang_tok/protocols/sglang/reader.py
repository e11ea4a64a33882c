"""SGLang's scheduler messages (`--protocol sglang`) read into what the egress routes, once.

A `BatchTokenIDOutput` becomes the same `Batch` a BATCH frame decodes to (rids, finish
reasons, counts, every row's new ids as one int64 buffer), so routing, slots, the ledger
and the shards' decoding are the native protocol's. What OPEN carries in that protocol
comes from a request's first row here: its prompt context (the ids before
`read_offsets[i]`) and its flags. What SGLang's detokenizer passes through to the
TokenizerManager is cut per shard as byte ranges (`carry.Carried`), never decoded.

The message is read in one pass: its fields split once (each still raw bytes); the columns
routing needs decoded (rids, finish reasons, ids, the token counts); the columns only a
request's first row needs (its read offset, flags, completion count) decoded only when the
message has rows of rids the router does not route; every other column checked by its
length alone. The route codes (`where`) are looked up once and handed to the router with
the finished rows, so nothing reads the message again.

Where each column sits is the running release's (`positions.Positions`, by field name from its
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
from collections.abc import Callable, Container
from itertools import compress, repeat
from typing import Annotated, Any

import msgspec
import numpy as np
from msgspec import Meta, Raw

from sglang_tok.finish import Finish, Stop
from sglang_tok.protocols.model import interface
from sglang_tok.protocols.model.batch import Batch, BatchHeader
from sglang_tok.protocols.model.control import Open, Ping, decode_control
from sglang_tok.protocols.model.errors import FrameError, checked_finishes
from sglang_tok.protocols.model.interface import LATE, Event, Idle, Probe, Relay
from sglang_tok.protocols.model.tags import TAG_PING
from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.carry import Carried
from sglang_tok.protocols.sglang.pickled import from_pickle
from sglang_tok.protocols.sglang.positions import CONFIGURE_LOGGING, EMBEDDING, FREEZE_GC, Positions
from sglang_tok.protocols.sglang.reply import Reply, beam_flags, by_worker
from sglang_tok.protocols.sglang.spans import Locator
from sglang_tok.protocols.sglang.workers import WorkerMap

_ENDPOINTS = ("ipc://", "tcp://")
_EMPTY = Raw(b"\x90")  # [] in msgpack
NonNeg = Annotated[int, Meta(ge=0)]
# the columns the egress may decode, each from its raw field alone (validated by type:
# counts are not negative); every other field is passed on as it came
_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {
    name: msgspec.msgpack.Decoder(kind) for name, kind in (
        ("rids", list[str] | None), ("http_worker_ipcs", list[str | None] | None),
        ("finished_reasons", list[Finish | None] | None),
        ("decode_ids", list[msgspec.msgpack.Ext] | None),  # SGLang's: one array ext per row
        ("read_offsets", list[NonNeg] | None),
        ("skip_special_tokens", list[bool] | None),
        ("spaces_between_special_tokens", list[bool] | None),
        ("no_stop_trim", list[bool] | None), ("prompt_tokens", list[NonNeg] | None),
        ("reasoning_tokens", list[NonNeg] | None), ("completion_tokens", list[NonNeg] | None),
        ("cached_tokens", list[NonNeg] | None))}
# decoded for every message: what routing, slots and usage need (and the completion
# counts, which a reply passes on: decoded, they travel as numbers)
_ALWAYS = ("prompt_tokens", "cached_tokens", "reasoning_tokens", "completion_tokens")
# decoded only for a message with rows of rids the router does not route
_FIRST_ROWS = ("read_offsets", "skip_special_tokens", "spaces_between_special_tokens",
               "no_stop_trim", "completion_tokens")
# finish reasons the typed decode refused, read again as any maps to say why
_loose_finishes = msgspec.msgpack.Decoder(list[dict[str, Any] | None] | None)
_ipcs_decoder = msgspec.msgpack.Decoder(list[str | None] | None)
_level_decoder = msgspec.msgpack.Decoder(str | None)
_tag_decoder = msgspec.msgpack.Decoder(str)
_pairs_decoder = msgspec.msgpack.Decoder(list[tuple[str, bytes]] | None)
_ids_rows = msgspec.msgpack.Decoder(list[msgspec.msgpack.Ext | list[int]] | None)
_raw_rows = msgspec.msgpack.Decoder(list[Raw])


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


class Message:
    """One `BatchTokenIDOutput`'s fields, each still raw, and its columns decoded on demand
    (each once, validated: an entry per row of the right type, or FrameError naming the
    message's rids)."""

    __slots__ = ("fields", "at", "have", "rids", "n", "got", "pairs")

    def __init__(self, fields: list[Raw], positions: Positions, rids: list[str],
                 pairs: bool) -> None:
        self.fields = fields
        self.at = positions.at
        self.have = len(fields)
        self.rids = rids
        self.n = len(rids)
        self.got: dict[str, Any] = {}
        self.pairs = pairs

    def raw(self, name: str) -> Raw:
        i = self.at[name]
        return self.fields[i] if i < self.have else wire.NIL

    def col(self, name: str) -> Any:
        """A read column, typed, one entry per row."""
        got = self.got.get(name)
        if got is None:
            got = self.got[name] = self._decode(name)
        return got

    def _decode(self, name: str) -> Any:
        raw, rids = self.raw(name), self.rids
        try:
            col = _DECODERS[name].decode(raw)
        except msgspec.ValidationError as exc:
            raise FrameError("header", f"{name}: {str(exc)[:160]}", rids) from None
        except msgspec.DecodeError as exc:
            raise FrameError("header", f"{name}: {str(exc)[:160]}", rids) from None
        if col is None or len(col) != self.n:
            raise FrameError("columns", f"{name} has {'nil' if col is None else len(col)} "
                             f"entries, expected {self.n}", rids)
        return col


class SglangReader:
    """Reads and validates scheduler messages whole: a message is accepted or dropped.
    `workers` keeps each live request's tokenizer worker (shared with the egress's
    writer, which sends the service's own last rows there). `per_row`: the input is
    SGLang's own process tree (ipc://), so a pickled column that only unpickling cuts
    (customized info) may be unpickled to cut it per shard; from a tcp:// peer it never is
    (a part of a message then carries it as nil)."""

    def __init__(self, positions: Positions, max_rid_length: int, max_row_ids: int,
                 keep_stop_ids: frozenset[int], workers: WorkerMap, per_row: bool = False,
                 out: Callable[[list[Reply]], list[Reply]] | None = None) -> None:
        self.positions = positions
        # what a message passed on as it came becomes for the TokenizerManager (pickled
        # again, for a pickle-IPC release)
        self.out = out or (lambda parts: parts)
        # a release that sends pickles (0.5.12-0.5.14): only from SGLang's own process tree
        self.pickle_ipc = positions.layout.ipc == "pickle"
        # SGLang 0.5.15-0.5.18 send an `array` as a [typecode, bytes] pair, not an ext
        self.pairs = positions.layout.arrays == "pair"
        self.max_rid_length = max_rid_length
        self.max_row_ids = max_row_ids
        self.keep = keep_stop_ids
        # the release's own trim rules (layout.trim_rules)
        self.through = positions.layout.kept_stop_str == "through"
        self.zero_kept = not positions.layout.stop_id_zero_trimmed
        self.workers = workers
        self.per_row = per_row
        # the tokenizer workers seen, each a small key (rows are grouped by it per shard)
        self.worker_key: dict[str | None, int] = {}
        self.worker_names: list[str | None] = []
        # the fields every message is checked by length alone (all but the read ones)
        self.others = positions.other_columns
        self.locate = Locator()  # where the carried columns' rows lie, message to message
        self.checked: dict[int, Any] = {}  # the fields of the last message checked by length

    def read(self, frame: memoryview, where: dict[str, int],
             ended: Container[str] = ()) -> Event:
        """One scheduler message; or the HTTP process's deep health probe, a native PING
        (no msgpack array starts with its tag), whose PONGs never go to SGLang."""
        if frame[0] == TAG_PING:
            ping = decode_control(frame)
            if isinstance(ping, Ping) and ping.nonce < 0:
                return Probe(ping.nonce, frame, counted=False)
            return Idle("ping")
        if self.pickle_ipc:
            frame = memoryview(from_pickle(frame, self.positions.layout))
        fields = self._fields(frame)
        positions = self.positions
        if fields[0] == wire.TOKEN_IDS_TAG:
            if len(fields) - 1 != positions.count:
                raise FrameError("columns", f"{len(fields) - 1} fields, where SGLang "
                                 f"{positions.layout.release}'s BatchTokenIDOutput has "
                                 f"{positions.count}: "
                                 "a message of another SGLang release than the one the service "
                                 "was started for", self._readable_rids(fields))
            rids = fields[positions.at["rids"]]
            if rids == wire.NIL or rids == _EMPTY:
                return Idle("sglang_idle")  # an idle batch: nothing to decode or answer
            return self.step(fields, where, ended)
        return self._other(fields, frame)

    def _other(self, fields: list[Raw], frame: memoryview) -> Event:
        """A message other than a BatchTokenIDOutput, by its tag; its fields read by name."""
        positions = self.positions
        try:
            tag = _tag_decoder.decode(fields[0])
            if tag == EMBEDDING:
                ipcs = _ipcs_decoder.decode(fields[positions.embedding_ipcs]) \
                    if 0 < positions.embedding_ipcs < len(fields) else None
                return Relay(self.out(by_worker(bytes(frame), ipcs, positions.embedding_whole)))
            if tag == FREEZE_GC:
                gc.freeze()
                return Idle("freeze_gc")
            if tag == CONFIGURE_LOGGING:
                level = _level_decoder.decode(fields[positions.log_level_at]) \
                    if 0 < positions.log_level_at < len(fields) else None
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
        at = self.positions.at["rids"]
        try:
            rids = msgspec.msgpack.decode(fields[at]) if at < len(fields) else []
        except (msgspec.DecodeError, ValueError, RecursionError):
            return []
        if not isinstance(rids, list):
            return []
        return [r for r in rids if isinstance(r, str) and r]

    # ------------------------------------------------------------------ the one pass
    def step(self, fields: list[Raw], where: dict[str, int],
             ended: Container[str] = ()) -> interface.Rows:
        """The message's rows as the egress routes them, validated whole; raise
        FrameError. `where`: the route of each live rid; `ended`: the rids that ended."""
        try:
            rids = _DECODERS["rids"].decode(fields[self.positions.at["rids"]])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FrameError("header", f"rids: {str(exc)[:160]}") from None
        if rids is None:
            raise FrameError("columns", "rids is nil")
        msg = Message(fields, self.positions, rids, self.pairs)
        self._check_lengths(msg)
        try:
            return self._rows(msg, where, ended)
        except ValueError as exc:  # an ids ext that is not integer ids
            raise FrameError("header", str(exc)[:200], rids) from None

    def _rows(self, msg: Message, where: dict[str, int], ended: Container[str]
              ) -> interface.Rows:
        rids = msg.rids
        fins, finished = self._finishes(msg)
        flat, counts, ids_ext = self._ids(msg)
        prompt, cached, reasoning, _ = (msg.col(name) for name in _ALWAYS)
        codes: list[int] = list(map(where.get, rids, repeat(-1)))
        unrouted = _all(codes, -1)
        for i in unrouted:  # no route: a new rid, or a late row of an ended one
            if rids[i] in ended:
                codes[i] = LATE
        firsts = FirstRows()
        self._refuse(msg, counts, codes, firsts, unrouted)
        if unrouted:
            flat = self._first_rows(msg, flat, counts, unrouted, codes, firsts)
        header = BatchHeader(rids, fins, prompt, counts, cached, reasoning)
        batch = Batch(header, memoryview(flat.data).cast("B"), len(flat), [])
        ipcs = self._ipcs(msg, unrouted)
        carry = Carried(self.positions, self.locate, self._carried_columns(msg.fields), rids,
                        counts, *self._worker_keys(ipcs, msg), self._beam_flags(msg), self.per_row,
                        ids_ext, msg.got)
        return interface.Rows(batch, opens=firsts.opens, fresh=firsts.fresh,
                              ends=firsts.refused, lost=firsts.lost, codes=codes,
                              finished=finished, carry=carry)

    def _check_lengths(self, msg: Message) -> None:
        """Every column the egress does not decode is nil, [] (absent for every row), one
        pickle of the whole message's value, or one entry per row: checked by its length."""
        fields, have, n, rids, nil = msg.fields, msg.have, msg.n, msg.rids, wire.NIL
        checked = self.checked  # the last message's fields that passed (a column of
        if checked.get(-1) != n:  # nils or zeros repeats message to message)
            checked.clear()
            checked[-1] = n
        for name, i in self.others:
            if i >= have:
                continue
            field = fields[i]
            if field == nil or checked.get(i) == field or wire.is_wrapped(field):
                continue
            checked[i] = field
            got = wire.array_length(fields[i])
            if got == -2:
                raise FrameError("columns", f"{name} is not a list", rids)
            if got > 0 and got != n:
                raise FrameError("columns", f"{name} has {got} entries, expected {n}", rids)
        for name in ("decoded_texts", "output_ids", *_FIRST_ROWS):
            got = wire.array_length(msg.raw(name))
            if got != n:
                raise FrameError("columns", f"{name} has {'nil' if got == -1 else got} "
                                 f"entries, expected {n}", rids)

    def _finishes(self, msg: Message) -> tuple[list[Finish | None], list[int]]:
        """Each row's finish as the shard trims by it (SGLang's own goes on in the reply),
        and the rows that have one: a column of nils (no row finished) is not decoded."""
        raw, n, rids = msg.raw("finished_reasons"), msg.n, msg.rids
        if wire.array_length(raw) == n and bytes(raw).endswith(b"\xc0" * n) \
                and len(raw) == n + wire.array_head_size(n):
            return [None] * n, []
        try:
            fins = _DECODERS["finished_reasons"].decode(raw)
        except msgspec.ValidationError as exc:
            try:  # read again as any maps, to say why
                loose = _loose_finishes.decode(raw)
            except msgspec.ValidationError:
                raise FrameError("header", f"finished_reasons: {str(exc)[:160]}",
                                 rids) from None
            fins = checked_finishes(loose, rids) if loose is not None else None
        except msgspec.DecodeError as exc:
            raise FrameError("header", f"finished_reasons: {str(exc)[:160]}", rids) from None
        if fins is None or len(fins) != n:
            raise FrameError("columns", f"finished_reasons has "
                             f"{'nil' if fins is None else len(fins)} entries, expected {n}",
                             rids)
        finished = list(compress(range(n), fins))
        if finished:
            fins = fins.copy()
            for i in finished:
                fins[i] = self._for_shard(fins[i])
        return fins, finished

    def _ids(self, msg: Message) -> tuple[np.ndarray, list[int], bool]:
        """Every row's ids as one int64 array, each row's count, and whether the column is
        SGLang's own form (an `array("q")` ext per row: its rows' sizes follow from the
        counts). The uniform case (every row as many ids) reads the field's bytes as one
        2-d view; any other is read row by row by msgspec."""
        raw = msg.raw("decode_ids")
        if self.pairs:
            try:
                pairs = _pairs_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise FrameError("header", f"decode_ids: {str(exc)[:160]}", msg.rids) \
                    from None
            if pairs is None or len(pairs) != msg.n:
                raise FrameError("columns", f"decode_ids has {len(pairs or [])} entries, "
                                 f"expected {msg.n}", msg.rids)
            flat, counts = wire.ids_of_pairs(pairs)
            return flat, counts, False
        got = wire.uniform_ids(raw, msg.n) or wire.raw_ids(raw, msg.n)
        if got is not None:
            return got[0], got[1], True
        try:
            values = _DECODERS["decode_ids"].decode(raw)
        except msgspec.ValidationError:
            try:
                values = _ids_rows.decode(raw)
            except msgspec.ValidationError as exc:
                raise FrameError("header", f"decode_ids: {str(exc)[:160]}", msg.rids) \
                    from None
        except msgspec.DecodeError as exc:
            raise FrameError("header", f"decode_ids: {str(exc)[:160]}", msg.rids) from None
        if values is None or len(values) != msg.n:
            raise FrameError("columns", f"decode_ids has {len(values or [])} entries, "
                             f"expected {msg.n}", msg.rids)
        flat, counts, q = wire.ids_column(values)
        return flat, counts, q

    def _carried_columns(self, fields: list[Raw]) -> list[Raw]:
        """The fields a reply passes on, as they came (the per-row tensors in base64, as
        SGLang's detokenizer sends them)."""
        nil = wire.NIL
        cols = [fields[i] if i < len(fields) else nil for i in self.positions.carried_at]
        for k in self.positions.b64:
            if cols[k] != nil:
                cols[k] = wire.b64_tensors(cols[k], self.pairs)
        return cols

    def _beam_flags(self, msg: Message) -> list[int]:
        """Rows with beam search output: the shard decodes their sequences with each row's
        options, which only the first row of a request told it otherwise."""
        at = self.positions.beams_at
        if not at or at >= msg.have or msg.fields[at] == wire.NIL:
            return []
        return beam_flags(msg.col("skip_special_tokens"),
                          msg.col("spaces_between_special_tokens"), msg.col("no_stop_trim"))

    def _ipcs(self, msg: Message, firsts: list[int]) -> list[str | None] | None:
        """The rows' tokenizer workers (None: the message names none), each live request's
        remembered from its first row (for the egress's own last rows)."""
        raw = msg.raw("http_worker_ipcs")
        n = msg.n
        if raw == wire.NIL:
            return None
        try:
            ipcs = _ipcs_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FrameError("header", f"http_worker_ipcs: {str(exc)[:160]}", msg.rids) \
                from None
        if ipcs is None:
            return None
        if len(ipcs) != n:
            raise FrameError("columns", f"http_worker_ipcs has {len(ipcs)} entries, "
                             f"expected {n}", msg.rids)
        if firsts and ipcs.count(None) != n:
            rids = msg.rids
            self.workers.note([rids[i] for i in firsts], [ipcs[i] for i in firsts])
            # a finished row does not forget its worker here: until its shard acknowledges
            # the row, a shard that dies fails the request, and that error goes to the same
            # worker (the egress forgets it once the last delta left the shard)
        return ipcs

    def _worker_keys(self, ipcs: list[str | None] | None, msg: Message
                     ) -> tuple[list[str | None] | None, np.ndarray | None]:
        """(the workers by key, each row's key where the rows name several): a shard's
        rows are grouped by worker, one reply per worker."""
        if ipcs is None:
            return None, None
        key = self.worker_key
        keys = list(map(key.get, ipcs))
        if None in keys:
            new = [ipc for ipc in dict.fromkeys(ipcs) if ipc not in key]
            bad = [ipc for ipc in new if ipc is not None and not ipc.startswith(_ENDPOINTS)]
            if bad:
                raise FrameError("columns", f"http_worker_ipcs entry {bad[0]!r:.80} is not an "
                                 "ipc:// or tcp:// endpoint", msg.rids)
            for ipc in new:
                key[ipc] = len(self.worker_names)
                self.worker_names.append(ipc)
            keys = list(map(key.get, ipcs))
        first = keys[0]
        if keys.count(first) == len(keys):
            return [self.worker_names[first]], None  # type: ignore[index]
        return self.worker_names, np.array(keys, np.int64)

    def _refuse(self, msg: Message, counts: list[int], codes: list[int],
                firsts: FirstRows, unrouted: list[int]) -> None:
        """Rows the service will not decode end their own request, not the message: a rid
        that is empty or over --max-rid-length, a row over --max-row-ids."""
        limit, most = self.max_rid_length, self.max_row_ids
        rids = msg.rids
        bad: list[tuple[int, str]] = []
        if not all(rids) or (limit and max(map(len, rids), default=0) > limit):
            bad += [(i, f"rid longer than --max-rid-length {limit}" if rid else "empty rid")
                    for i, rid in enumerate(rids) if not rid or (limit and len(rid) > limit)]
        if most and max(counts, default=0) > most:
            bad += [(i, f"a row of more than --max-row-ids {most} ids")
                    for i, count in enumerate(counts) if count > most]
        for i, why in bad:
            if codes[i] != LATE:  # once per request: then its rows are late
                firsts.refused.append((rids[i], why))
            if codes[i] != LATE and codes[i] != -1:
                unrouted.append(i)
            codes[i] = LATE
        if bad:
            unrouted.sort()

    def _first_rows(self, msg: Message, flat: np.ndarray, counts: list[int],
                    unrouted: list[int], codes: list[int], firsts: FirstRows) -> np.ndarray:
        """Rows of rids the router does not route: a first row's options and prompt context
        (its ids before `read_offsets[i]`, cut out of `flat`), or a late or lost row; the
        ids without the context."""
        refused = {rid for rid, _ in firsts.refused}
        starts = np.cumsum(counts) - counts
        cut: list[tuple[int, int]] = []
        beams = _beam_rows(msg.fields, self.positions.beams_at)
        rids = msg.rids
        offsets, completion = msg.col("read_offsets"), msg.col("completion_tokens")
        skips, spaces_col = msg.col("skip_special_tokens"), \
            msg.col("spaces_between_special_tokens")
        no_trims = msg.col("no_stop_trim")
        for i in unrouted:
            rid, at = rids[i], offsets[i]
            if rid in refused:
                continue
            # a beam group's leader sends one row, at its end, counting every sequence's
            # ids: it is its first row whatever it counts
            if completion[i] != counts[i] - at and i not in beams:  # not its first row
                if codes[i] == -1:
                    firsts.lost.append(rid)
                continue  # else a late row of an ended request
            prompt: list[int] = []
            if at:
                start = int(starts[i])
                prompt = flat[start:start + at].tolist()
                cut.append((start, at))
                counts[i] -= at
            skip, no_trim, spaces = skips[i], no_trims[i], spaces_col[i]
            if prompt or not skip or no_trim or not spaces or codes[i] == LATE:
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


def _all(values: list[int], value: int) -> list[int]:
    """Where `value` is in `values`, at C speed (the steady state has few or none)."""
    out: list[int] = []
    i = -1
    index = values.index
    try:
        while True:
            i = index(value, i + 1)
            out.append(i)
    except ValueError:
        return out


def _beam_rows(fields: list[Raw], at: int) -> frozenset[int]:
    """The rows that carry beam search output (none, in a message without the column)."""
    if not at or at >= len(fields) or fields[at] == wire.NIL:
        return frozenset()
    return frozenset(i for i, b in enumerate(wire.rows_of(fields[at])) if b != wire.NIL)
