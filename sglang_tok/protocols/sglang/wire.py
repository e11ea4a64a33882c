"""SGLang's scheduler -> detokenizer -> TokenizerManager messages in their msgpack IPC form,
read and written without importing SGLang; which field sits where is the running release's
(`layout.py`, `positions.py`), never this module's.

A message is a msgpack array: the struct's class name, then its fields in declaration
order (msgspec's `tag=True, array_like=True`); SGLang's encoder writes every field.
`array.array` values are msgpack ext type 1 (a big-endian u32 length of a msgpack metadata
value, the typecode, then the raw bytes); ext 2 is a torch tensor and ext 3 a numpy array,
with metadata `[shape, dtype(, device)]`. The service decodes only the columns it reads;
every other field is a `msgspec.Raw` that goes back out byte for byte.
"""

from __future__ import annotations

import base64
import struct
from array import array
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
from msgspec import Raw
from msgspec.msgpack import Ext

from sglang_tok.ragged import ragged_index

from .layout import Layout, builtin

EXT_ARRAY, EXT_TORCH, EXT_NUMPY = 1, 2, 3
NIL = Raw(b"\xc0")
_META = struct.Struct(">I")
# the payload prefix of an int64 `array("q")` ext: metadata length 2, then msgpack "q"
_Q_PREFIX = b"\x00\x00\x00\x02\xa1q"
_Q_AT = len(_Q_PREFIX)

# a message's fields, each still raw: the service reads a few columns of a message and
# passes the rest on byte for byte, so it decodes only those (by the release's positions)
fields_decoder = msgspec.msgpack.Decoder(list[Raw])
TOKEN_IDS_TAG = Raw(msgspec.msgpack.encode("BatchTokenIDOutput"))


def _sglang_ext(obj: Any) -> Any:
    """What msgspec cannot write itself, as SGLang's encoder writes it: an `array.array`
    (the stand-in's ids; ext type 1)."""
    if isinstance(obj, array):
        return array_ext(obj, obj.typecode)
    raise NotImplementedError(type(obj).__name__)


encoder = msgspec.msgpack.Encoder(enc_hook=_sglang_ext)
_raw_rows = msgspec.msgpack.Decoder(list[Raw])
_ext_rows = msgspec.msgpack.Decoder(list[Ext | None])


class BeamSequence(msgspec.Struct, omit_defaults=True):
    """SGLang's `BeamSearchSequence` (a map on the wire), to build messages where SGLang is
    not (the stand-in scheduler, tests, tools); the service reads sequences by key."""

    tokens: list[int]
    cum_logprob: float = 0.0
    finish_reason: Any = None
    text: str | None = None
    beam_score: float | None = None


class BeamOutput(msgspec.Struct, tag="BeamSearchOutput", array_like=True, kw_only=True):
    """SGLang's `BeamSearchOutput` (0.5.19 on), to build messages where SGLang is not."""

    rids: list[str] | None = None
    http_worker_ipcs: list[str | None] | None = None
    sequences: list[BeamSequence]


class WeightVersionSpan(msgspec.Struct, array_like=True, kw_only=True):
    """SGLang's `WeightVersionSpan` (0.5.19 on): which weights made output ids [start, end);
    the stand-in sends it where SGLang's own class is not."""

    version: str
    start: int
    end: int


def array_length(raw: Raw | bytes | memoryview) -> int:
    """The element count of a msgpack array from its header alone; -1 for nil, -2 for a
    value that is not an array."""
    mv = memoryview(raw)
    if not len(mv):
        return -2
    b = mv[0]
    if 0x90 <= b <= 0x9F:
        return b & 0x0F
    if b == 0xDC and len(mv) >= 3:
        return int.from_bytes(mv[1:3], "big")
    if b == 0xDD and len(mv) >= 5:
        return int.from_bytes(mv[1:5], "big")
    return -1 if b == 0xC0 else -2


# --------------------------------------------------------------------------- ext payloads
def array_ext(ids: Any, typecode: str = "q") -> Ext:
    """An `array.array` as SGLang's encoder writes it."""
    meta = msgspec.msgpack.encode(typecode)
    raw = array(typecode, ids).tobytes() if not isinstance(ids, array) else ids.tobytes()
    return Ext(EXT_ARRAY, _META.pack(len(meta)) + meta + raw)


def buffer_ext(code: int, meta: Any, raw: bytes) -> Ext:
    """A buffer ext (types 1-3) as SGLang's encoder writes it: metadata, then raw bytes."""
    head = msgspec.msgpack.encode(meta)
    return Ext(code, _META.pack(len(head)) + head + raw)


def buffer_payload(data: bytes | memoryview) -> tuple[Any, memoryview]:
    """(metadata, raw bytes) of a buffer ext (types 1-3); ValueError if it is cut short."""
    mv = memoryview(data)
    if len(mv) < _META.size:
        raise ValueError("buffer ext without its metadata length")
    size = _META.unpack_from(mv)[0]
    at = _META.size + size
    if at > len(mv):
        raise ValueError("buffer ext metadata runs past its payload")
    return msgspec.msgpack.decode(mv[_META.size:at]), mv[at:]


def int64_bytes(value: Ext | list[int] | tuple[str, bytes]) -> bytes:
    """One row's ids as little-endian int64 bytes: an `array` ext of any integer typecode,
    a numpy array ext, SGLang 0.5.15-0.5.18's `[typecode, bytes]` pair, or a plain list."""
    if isinstance(value, tuple):
        return _pair_bytes(*value)
    if isinstance(value, list):
        return array("q", value).tobytes()
    data: bytes = value.data  # type: ignore[assignment]  # bytes when msgspec decodes it
    if value.code == EXT_ARRAY and data[:_Q_AT] == _Q_PREFIX:
        if (len(data) - _Q_AT) & 7:
            raise ValueError(f"an int64 array ext of {len(data) - _Q_AT} bytes")
        return data[_Q_AT:]
    meta, raw = buffer_payload(data)
    if value.code == EXT_ARRAY and isinstance(meta, str) and len(meta) == 1 \
            and meta in "bBhHiIlLqQ":
        signed = "i" if meta.islower() else "u"
        return np.frombuffer(raw, f"<{signed}{array(meta).itemsize}").astype("<i8").tobytes()
    if value.code == EXT_NUMPY and isinstance(meta, list) and len(meta) == 2:
        dtype = np.dtype(meta[1])
        if dtype.kind in "iu":
            return np.frombuffer(raw, dtype).astype("<i8").tobytes()
    raise ValueError(f"decode_ids entry is ext {value.code} {meta!r:.40}, not integer ids")


def _pair_bytes(typecode: str, raw: bytes) -> bytes:
    if typecode == "q":
        if len(raw) & 7:
            raise ValueError(f"an int64 array of {len(raw)} bytes")
        return raw
    if len(typecode) != 1 or typecode not in "bBhHiIlLqQ":
        raise ValueError(f"decode_ids entry is an array of {typecode!r:.8}, not integer ids")
    size = array(typecode).itemsize
    if len(raw) % size:
        raise ValueError(f"an array of {typecode!r} of {len(raw)} bytes")
    signed = "i" if typecode.islower() else "u"
    return np.frombuffer(raw, f"<{signed}{size}").astype("<i8").tobytes()


def ids_of_pairs(values: list[tuple[str, bytes]]) -> tuple[np.ndarray, list[int]]:
    """`ids_column` for SGLang 0.5.15-0.5.18, which send each row's `array("q")` as a
    `[typecode, bytes]` pair: one join where every row is int64, else row by row."""
    if all(code == "q" for code, _ in values):
        raws = [raw for _, raw in values]
        lens = list(map(len, raws))
        if any(n & 7 for n in lens):
            raise ValueError("an int64 array whose bytes are not a whole number of ids")
        return np.frombuffer(b"".join(raws), "<i8"), [n >> 3 for n in lens]
    rows = [_pair_bytes(code, raw) for code, raw in values]
    return np.frombuffer(b"".join(rows), "<i8"), [len(b) >> 3 for b in rows]


def array_pair(ids: Any) -> list[Any]:
    """An `array("q")` as SGLang 0.5.15-0.5.18's encoder writes it: [typecode, bytes]."""
    return ["q", array("q", ids).tobytes()]


_Q_HEAD = np.frombuffer(_Q_PREFIX, np.uint8)
_Q_SPAN = np.arange(_Q_AT)
_data_of = attrgetter("data")
_code_of = attrgetter("code")


def array_head_size(count: int) -> int:
    """The size of a msgpack array's header of `count` entries."""
    return 1 if count < 16 else 3 if count < 1 << 16 else 5


def uniform_ids(raw: Raw | bytes, n: int) -> tuple[np.ndarray, list[int]] | None:
    """`ids_column` read straight from a column's bytes where every row is an `array("q")`
    ext of as many ids (a decode step's usual message): one 2-d view of the field, no
    object per row. None for any other column."""
    mv = memoryview(raw)
    if not n or array_length(mv) != n:
        return None
    body = mv[array_head_size(n):]
    width, left = divmod(len(body), n)
    if left or width < 3 + _Q_AT:
        return None
    head = 3 if width - 3 < 1 << 8 else 4  # ext8, or ext16
    size = width - head - _Q_AT
    if size & 7 or (head == 4 and width - head >= 1 << 16):
        return None
    rows = np.frombuffer(body, np.uint8).reshape(n, width)
    want = bytes((0xC7, width - 3, EXT_ARRAY)) if head == 3 else \
        bytes((0xC8, (width - 4) >> 8, (width - 4) & 0xFF, EXT_ARRAY))
    if not (rows[:, :head + _Q_AT] == np.frombuffer(want + _Q_PREFIX, np.uint8)).all():
        return None
    return rows[:, head + _Q_AT:].copy().view("<i8").ravel(), [size >> 3] * n


def raw_ids(raw: Raw | bytes, n: int) -> tuple[np.ndarray, list[int]] | None:
    """`ids_column` for SGLang's form (an `array("q")` ext per row) of rows of several
    sizes, read from the column's bytes: each row's size from msgspec's raw rows, every
    row's ext head checked at once, the ids gathered. None for any other column."""
    try:
        rows = _raw_rows.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if len(rows) != n or not n:
        return None
    sizes = np.fromiter(map(len, rows), np.int64, n)
    body = np.frombuffer(raw, np.uint8)
    starts = sizes.cumsum() - sizes + array_head_size(n)
    lead = body[starts]
    wide = lead == 0xC8  # ext16: a row of over 31 ids
    if wide.any():
        if not ((lead == 0xC7) | wide).all():
            return None
        head = 3 + wide
    elif not (lead == 0xC7).all():
        return None
    else:
        head = 3
    at = starts + head  # the ext's type, then the payload's 6-byte head
    if not (body[(at - 1)[:, None] + _EXT_SPAN] == _EXT_HEAD).all():
        return None
    payload = sizes - head - _Q_AT
    if (payload & 7).any():
        return None
    return body[ragged_index(at + _Q_AT, payload)].view("<i8"), (payload >> 3).tolist()


_EXT_HEAD = np.frombuffer(bytes((EXT_ARRAY,)) + _Q_PREFIX, np.uint8)
_EXT_SPAN = np.arange(len(_EXT_HEAD))


def ids_column(values: list[Any]) -> tuple[np.ndarray, list[int], bool]:
    """Every row's ids as one flat int64 array, each row's count, and whether every row was
    an `array("q")` ext (SGLang's form): that column is read with a few whole-column steps
    (the exts' payloads joined, their 6-byte heads checked and cut out at once); any other
    form (other typecodes, numpy exts, plain lists) row by row (`int64_bytes`)."""
    n = len(values)
    try:
        datas = list(map(_data_of, values))
        codes = set(map(_code_of, values))
    except AttributeError:  # a plain list among them
        return _ids_by_row(values)
    if codes != {EXT_ARRAY} or not n:
        return _ids_by_row(values)
    sizes = set(map(len, datas))
    if len(sizes) == 1:  # every row as many ids (a decode step): one 2-d view
        size = sizes.pop()
        if size < _Q_AT or (size - _Q_AT) & 7:
            return _ids_by_row(values)
        rows = np.frombuffer(b"".join(datas), np.uint8).reshape(n, size)
        if not (rows[:, :_Q_AT] == _Q_HEAD).all():
            return _ids_by_row(values)
        return rows[:, _Q_AT:].copy().view("<i8").ravel(), [(size - _Q_AT) >> 3] * n, True
    lens = np.fromiter(map(len, datas), np.int64, n)
    body = lens - _Q_AT
    if body.min() < 0 or (body & 7).any():
        return _ids_by_row(values)
    raw = np.frombuffer(b"".join(datas), np.uint8)
    heads = (np.cumsum(lens) - lens)[:, None] + _Q_SPAN
    if not (raw[heads] == _Q_HEAD).all():
        return _ids_by_row(values)
    keep = np.ones(len(raw), bool)
    keep[heads.ravel()] = False
    return raw[keep].view("<i8"), (body >> 3).tolist(), True


def _ids_by_row(values: list[Any]) -> tuple[np.ndarray, list[int], bool]:
    rows = list(map(int64_bytes, values))
    return np.frombuffer(b"".join(rows), "<i8"), [len(b) >> 3 for b in rows], False


def b64_tensors(raw: Raw, pairs: bool = False) -> Raw:
    """Per-row tensors (ext 2 or 3; with `pairs`, SGLang 0.5.15-0.5.18's `[shape, dtype,
    bytes]`) as the base64 of their raw bytes, as SGLang's detokenizer sends
    `routed_experts` and `indexer_topk` on; nil stays nil."""
    if array_length(raw) < 0:
        return raw
    out: list[str | None] = []
    if pairs:
        for row in _tensor_rows.decode(raw):
            out.append(None if row is None else base64.b64encode(row[2]).decode("ascii"))
        return Raw(encoder.encode(out))
    for item in _ext_rows.decode(raw):
        if item is None:
            out.append(None)
            continue
        _, data = buffer_payload(item.data)  # type: ignore[arg-type]
        out.append(base64.b64encode(data).decode("ascii"))
    return Raw(encoder.encode(out))


_tensor_rows = msgspec.msgpack.Decoder(list[tuple[Any, str, bytes] | None])


# how SGLang's `PickleWrapper(data)` starts on the wire: one pickle of a whole field
_WRAPPER_HEAD = b"\x92\xadPickleWrapper"


def is_wrapped(raw: Raw | bytes) -> bool:
    """A field that is one pickle of the whole message's value, not an entry per row."""
    return memoryview(raw)[:len(_WRAPPER_HEAD)] == _WRAPPER_HEAD


def rows_of(raw: Raw) -> list[Raw]:
    """A per-row column cut into its rows' values, each still raw."""
    return _raw_rows.decode(raw)


def encode_message(tag: str, fields: list[Any]) -> bytes:
    """[tag, *fields], every field written as SGLang's own encoder writes them (its decoder
    requires the fields that have no default); Raw values go as they are."""
    return encoder.encode([tag, *fields])


def encode_token_ids(rows: dict[str, list[Any]], layout: Layout | None = None) -> bytes:
    """A BatchTokenIDOutput of a release (default: the newest tested) from columns by field
    name (tests, benchmarks and tools build scheduler messages with it); a missing column is
    nil, ids lists become `array`s as the release writes them."""
    layout = layout or builtin()
    as_array = array_pair if layout.arrays == "pair" else array_ext
    fields: list[Any] = []
    for name in layout.token_ids:
        val = rows.get(name)
        if name in ("decode_ids", "output_ids") and val is not None:
            val = [v if isinstance(v, Ext) else as_array(v) for v in val]
        fields.append(val)
    return encode_message("BatchTokenIDOutput", fields)
