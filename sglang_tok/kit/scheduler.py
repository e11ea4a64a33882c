"""The scheduler side of the integration kit: one BATCH frame per step, plus control frames.

A scheduler loop calls `encode_step` (or `Scheduler.step`, which also sends) once per step
with its columns as it already holds them: rids, one id buffer per row, finish reasons,
counts, and optional logprob families. The bytes are those of `docs/protocol.md` section 3,
laid out as SGLang 0.5.23's `push_generation` lays them out (the golden frames under
`tests/golden/` are rebuilt from their rows byte for byte by the tests):

- 6 header columns when no row has extras; all 18 (absent families as `[]`) when any row
  of the step has a logprob or hidden-state family; all 24 when any trailing column
  (`weight_versions` ... `ended_outside_stream`) is given.
- Token ids: when every row is an int64 buffer (`array('q')`, a numpy int64 array, any
  object with the buffer protocol) the rows are concatenated as bytes with one
  `b"".join`, never touched element by element; int32 rows (`array('i')`, SGLang's own
  `output_ids`) are joined the same way and widened in one vectorised call (numpy, when
  installed; else one C pass); plain lists are packed in one C pass.
"""

from __future__ import annotations

import importlib
import itertools
from array import array
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import msgspec
import zmq

from ring.sockets import make_socket
from sglang_tok.protocols.model import control
from sglang_tok.protocols.model.batch import (
    FAMILIES,
    HEADER_FIELDS,
    REQUIRED_COLUMNS,
    TRAILING_FIRST,
)
from sglang_tok.security import Curve

try:  # optional: numpy widens int32 id rows without a Python-level pass
    _np: Any = importlib.import_module("numpy")
except ImportError:  # pragma: no cover - numpy is not a dependency
    _np = None

_encode = msgspec.msgpack.Encoder().encode
_EXTRAS_END = TRAILING_FIRST  # columns 6..17: every family's lens
_ALL_COLUMNS = len(HEADER_FIELDS)
FAMILY_NAMES = tuple(name for name, _, _ in FAMILIES)
TRAILING_NAMES = HEADER_FIELDS[TRAILING_FIRST:]

# A step's rows of one extras family, SGLang's columnar shape (`*_val`, `*_idx`):
#   flat ("output_logprobs", "input_logprobs"): (values per row, ids per row);
#   ragged ("output_top", "input_top", "output_token_ids", "input_token_ids"):
#       (values per row per position, ids per row per position), a position None or [] = null;
#   hidden ("output_hidden"): (values per row per position, None).
# A row with None instead of its list has no entries (the family is still written for it).
FamilyRows = tuple[Sequence[Any], Sequence[Any] | None]


def _ids_bytes(ids: Sequence[Any], count: int) -> bytes:
    """Row id buffers as little-endian int64 bytes, with no per-element Python work."""
    if not ids:
        return b""
    try:
        raw = b"".join(ids)
    except TypeError:  # plain lists of ints
        return array("q", chain.from_iterable(ids)).tobytes()
    if len(raw) == 8 * count:
        return raw
    if len(raw) == 4 * count:  # int32 rows (SGLang's `array("i")` output_ids)
        if _np is not None:  # one vectorised widening
            wide: bytes = _np.frombuffer(raw, dtype="<i4").astype("<i8").tobytes()
            return wide
        return array("q", memoryview(raw).cast("i")).tobytes()
    raise ValueError(f"id rows hold {len(raw)} bytes for {count} ids: mixed item sizes")


def _packed(rows: Sequence[Any], code: str, count: int) -> bytes:
    """Flatten rows (lists or buffers of `code`, 4-byte items) into one little-endian run."""
    rows = [r for r in rows if r is not None]
    if not rows:
        return b""
    if not isinstance(rows[0], (list, tuple)):
        mv = memoryview(rows[0])
        if mv.itemsize == 4 and (mv.format in ("f", "<f")) == (code == "f"):
            raw = b"".join(rows)
            if len(raw) == 4 * count:
                return raw
    return array(code, chain.from_iterable(rows)).tobytes()


def _flat_family(rows: FamilyRows, n: int, cols: list[Any], idx: int, data: list[bytes]) -> None:
    vals, ids = rows
    empty: list[Any] = []
    vals = [v if v is not None else empty for v in vals]
    lens = list(map(len, vals))
    if len(lens) != n:
        raise ValueError(f"{HEADER_FIELDS[idx]}: {len(lens)} rows for a step of {n}")
    cols[idx] = lens
    total = sum(lens)
    data.append(_packed(vals, "f", total))
    data.append(_packed([i if i is not None else empty for i in ids or []], "i", total))


def _ragged_family(rows: FamilyRows, n: int, cols: list[Any], idx: int, data: list[bytes],
                   hidden: bool) -> None:
    """Ragged rows are Python lists of positions: the cold path (few requests ask)."""
    vals, ids = rows
    if len(vals) != n:
        raise ValueError(f"{HEADER_FIELDS[idx]}: {len(vals)} rows for a step of {n}")
    reqlens = [len(r) if r else 0 for r in vals]
    poslens = [len(p) if p else 0 for r in vals if r for p in r]
    cols[idx], cols[idx + 1] = reqlens, poslens
    flat_vals = [p for r in vals if r for p in r if p]
    data.append(array("f", chain.from_iterable(flat_vals)).tobytes())
    if not hidden:
        assert ids is not None, f"{HEADER_FIELDS[idx]}: ragged pairs need ids"
        flat_ids = [p for r in ids if r for p in r if p]
        data.append(array("i", chain.from_iterable(flat_ids)).tobytes())


def encode_step(rids: Sequence[str], ids: Sequence[Any],
                finish_reasons: Sequence[dict[str, Any] | None] | None = None,
                prompt_tokens: Sequence[int] | None = None,
                cached_tokens: Sequence[int] | None = None,
                reasoning_tokens: Sequence[int] | None = None,
                extras: Mapping[str, FamilyRows] | None = None,
                trailing: Mapping[str, Sequence[Any]] | None = None) -> bytes:
    """One step's BATCH frame (tag included). Column args are per row, in row order.

    Count columns left out are zeros, finish reasons left out are all None (running).
    `extras` maps family names of `protocol.FAMILIES` to `FamilyRows`; `trailing` maps the
    trailing column names (`ended_outside_stream`, ...) to one value per row.
    """
    n = len(rids)
    tok_lens = list(map(len, ids))
    if len(tok_lens) != n:
        raise ValueError(f"{len(tok_lens)} id rows for {n} rids")
    zeros = [0] * n
    cols: list[Any] = [
        rids if isinstance(rids, list) else list(rids),
        list(finish_reasons) if finish_reasons is not None else [None] * n,
        list(prompt_tokens) if prompt_tokens is not None else zeros,
        tok_lens,
        list(cached_tokens) if cached_tokens is not None else zeros,
        list(reasoning_tokens) if reasoning_tokens is not None else zeros,
    ]
    for c in (1, 2, 4, 5):
        if len(cols[c]) != n:
            raise ValueError(f"column {HEADER_FIELDS[c]} has {len(cols[c])} entries for {n}")
    data = [_ids_bytes(ids, sum(tok_lens))]
    ncols = REQUIRED_COLUMNS
    if extras or trailing:
        cols += [[] for _ in HEADER_FIELDS[REQUIRED_COLUMNS:]]
    if extras:
        unknown = set(extras) - set(FAMILY_NAMES)
        if unknown:
            raise ValueError(f"unknown extras families {sorted(unknown)}")
        for name, idx, kind in FAMILIES:
            rows = extras.get(name)
            if rows is None:
                continue
            if kind == "flat":
                _flat_family(rows, n, cols, idx, data)
            else:
                _ragged_family(rows, n, cols, idx, data, kind == "hidden")
        ncols = _EXTRAS_END
    if trailing:
        for c, name in enumerate(TRAILING_NAMES, TRAILING_FIRST):
            vals = trailing.get(name)
            if vals is not None:
                if len(vals) != n:
                    raise ValueError(f"column {name} has {len(vals)} entries for {n}")
                cols[c] = list(vals)
        ncols = _ALL_COLUMNS
    head = _encode(cols[:ncols])
    return b"".join((b"\x02", len(head).to_bytes(4, "little"), head, *data))


# one sequence for every Scheduler of this process: a frontend may hear several of them
_NONCES = itertools.count(1)


class Scheduler:
    """A scheduler's PUSH into the service's input ring: steps and control frames.

    Everything goes through one socket, so an `open()` always reaches the ring before the
    rid's first row (protocol section 4).
    """

    def __init__(self, endpoint: str, ctx: zmq.Context | None = None, hwm: int = 1000,
                 sndtimeo_ms: int = -1, curve: Curve | None = None) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = make_socket(self.ctx, zmq.PUSH, endpoint, bind=False, hwm=hwm,
                                sndtimeo_ms=sndtimeo_ms, curve=curve)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def step(self, rids: Sequence[str], ids: Sequence[Any], **columns: Any) -> int:
        """Build and send one step's BATCH; return its frame size. See `encode_step`."""
        if not rids:
            return 0
        frame = encode_step(rids, ids, **columns)
        self.send(frame)
        return len(frame)

    def open(self, rid: str, **opts: Any) -> None:
        self.send(control.encode_control(control.Open(rid, **opts)))

    def error(self, rid: str, message: str) -> None:
        self.send(control.encode_control(control.Error(rid, message)))

    def abort(self, *rids: str) -> None:
        if rids:
            self.send(control.encode_control(control.Abort(list(rids))))

    def result(self, rid: str, payload: bytes) -> None:
        self.send(control.encode_control(control.Result(rid, payload)))

    def ping(self) -> int:
        """Send a PING; return its nonce (the frontend waits for its PONGs)."""
        nonce = next(_NONCES)
        self.send(control.encode_control(control.Ping(nonce)))
        return nonce

    def close(self) -> None:
        self.sock.close(linger=1000)
