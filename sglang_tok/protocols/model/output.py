"""The output format chosen once (`--output-format`): its sink, its encoder, and the
frontend's one decoder for every output frame."""

from __future__ import annotations

import msgspec

from sglang_tok.protocols.model.columns import Columns, ColumnsOut, columns_of, encode_columns
from sglang_tok.protocols.model.control import Pong, Restarted
from sglang_tok.protocols.model.deltas import Delta, Deltas, DeltasOut, encode_deltas
from sglang_tok.protocols.model.errors import FrameError
from sglang_tok.protocols.model.packed import Packed, PackedOut, encode_packed
from sglang_tok.protocols.model.tags import (
    TAG_COLUMNS,
    TAG_DELTAS,
    TAG_PACKED,
    TAG_PONG,
    TAG_RESTARTED,
)

OUTPUT_FORMATS = ("deltas", "columnar", "packed")


Sink = DeltasOut | ColumnsOut  # where a shard's handlers put the deltas of one message


def encode_output(fmt: str, shard: int, seq: int, deltas: list[Delta] | ColumnsOut) -> bytes:
    """One output message in the configured format (`--output-format`)."""
    if isinstance(deltas, PackedOut):
        return encode_packed(deltas.build_packed(shard, seq))
    if isinstance(deltas, ColumnsOut):
        return encode_columns(deltas.build(shard, seq))
    if fmt == "columnar":
        return encode_columns(columns_of(shard, seq, deltas))
    if fmt == "packed":
        out = PackedOut()
        for d in deltas:
            out.append(d)
        return encode_packed(out.build_packed(shard, seq))
    return encode_deltas(Deltas(shard, seq, deltas))


def output_sink(fmt: str) -> Sink:
    """What a shard's handlers append a message's deltas to, for `--output-format`."""
    if fmt == "packed":
        return PackedOut()
    return ColumnsOut() if fmt == "columnar" else DeltasOut()


_deltas_decoder = msgspec.msgpack.Decoder(Deltas)
_pong_decoder = msgspec.msgpack.Decoder(Pong)
_columns_decoder = msgspec.msgpack.Decoder(Columns)
_restarted_decoder = msgspec.msgpack.Decoder(Restarted)
_packed_decoder = msgspec.msgpack.Decoder(Packed)


def decode_output(frame: bytes | memoryview) -> Deltas | Pong | Columns | Packed | Restarted:
    """Decode a frame the service sends to the frontend: DELTAS, COLUMNS, PACKED, PONG or
    RESTARTED."""
    tag = frame[0]
    if tag == TAG_PACKED:
        return _packed_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_COLUMNS:
        return _columns_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_DELTAS:
        return _deltas_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_PONG:
        return _pong_decoder.decode(memoryview(frame)[1:])
    if tag == TAG_RESTARTED:
        return _restarted_decoder.decode(memoryview(frame)[1:])
    raise FrameError("unknown_tag", f"unknown output tag 0x{tag:02x}")
