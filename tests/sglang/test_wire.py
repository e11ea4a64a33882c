"""SGLang's msgpack IPC form, read and written by our own structs: every golden message
round-trips byte for byte, the ext types decode as SGLang encodes them, and the reply
writer puts the scheduler's fields back unchanged."""

from __future__ import annotations

import base64
from array import array

import msgspec
import numpy as np
import pytest
from sglang_cases import CASES, GOLDEN, MANIFEST

from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import builtin
from sglang_tok.protocols.sglang.positions import Positions
from sglang_tok_testkit.sglang_side import frames, reply_rows


def test_the_builtin_layout_is_the_golden_messages_release() -> None:
    layout = builtin()
    assert layout.release == MANIFEST["sglang"]
    assert layout.token_ids == tuple(MANIFEST["fields"]["BatchTokenIDOutput"])
    assert layout.str_output == tuple(MANIFEST["fields"]["BatchStrOutput"])


@pytest.mark.parametrize("case", CASES)
def test_golden_messages_round_trip_byte_for_byte(case: str) -> None:
    for msg in frames(GOLDEN / f"{case}.in.bin"):
        fields = wire.fields_decoder.decode(msg)
        assert fields[0] == wire.TOKEN_IDS_TAG and len(fields) == 1 + len(builtin().token_ids)
        assert wire.encode_message("BatchTokenIDOutput", fields[1:]) == msg
    for msg in frames(GOLDEN / f"{case}.out.bin"):
        assert reply_rows(msg)  # SGLang's replies read as the service's do


def test_array_ext_as_sglang_writes_it() -> None:
    ext = wire.array_ext([1, 2, 3])
    assert ext.code == wire.EXT_ARRAY
    meta, raw = wire.buffer_payload(ext.data)
    assert meta == "q" and bytes(raw) == array("q", [1, 2, 3]).tobytes()
    assert wire.int64_bytes(ext) == array("q", [1, 2, 3]).tobytes()


@pytest.mark.parametrize("typecode", ["b", "h", "i", "l", "q", "I", "Q"])
def test_ids_of_any_integer_array_typecode(typecode: str) -> None:
    ext = wire.array_ext(array(typecode, [5, 0, 127]), typecode)
    assert np.frombuffer(wire.int64_bytes(ext), "<i8").tolist() == [5, 0, 127]


def test_ids_of_a_numpy_ext_and_of_a_plain_list() -> None:
    arr = np.array([7, 8], np.int32)
    meta = msgspec.msgpack.encode([list(arr.shape), arr.dtype.str])
    ext = msgspec.msgpack.Ext(wire.EXT_NUMPY, len(meta).to_bytes(4, "big") + meta + arr.tobytes())
    assert np.frombuffer(wire.int64_bytes(ext), "<i8").tolist() == [7, 8]
    assert np.frombuffer(wire.int64_bytes([9, 10]), "<i8").tolist() == [9, 10]


@pytest.mark.parametrize("payload", [b"", b"\x00\x00", b"\x00\x00\x00\x09\xa1q",
                                     b"\x00\x00\x00\x02\xa1d" + b"\x00" * 8,
                                     b"\x00\x00\x00\x02\xa1q" + b"\x00" * 7])
def test_ids_of_a_broken_ext_is_an_error(payload: bytes) -> None:
    with pytest.raises(ValueError):
        wire.int64_bytes(msgspec.msgpack.Ext(wire.EXT_ARRAY, payload))


def test_tensors_become_base64_of_their_bytes_as_sglang_sends_them_on() -> None:
    """SGLang's detokenizer base64-encodes `routed_experts` and `indexer_topk` tensors."""
    data = np.arange(6, dtype=np.int32).tobytes()
    meta = msgspec.msgpack.encode([[2, 3], "int32", "cpu"])
    ext = msgspec.msgpack.Ext(wire.EXT_TORCH, len(meta).to_bytes(4, "big") + meta + data)
    raw = msgspec.Raw(msgspec.msgpack.encode([ext, None]))
    assert msgspec.msgpack.decode(wire.b64_tensors(raw)) == [base64.b64encode(data).decode(),
                                                             None]
    assert wire.b64_tensors(wire.NIL) is wire.NIL


def test_array_length_reads_headers_only() -> None:
    for n in (0, 1, 15, 16, 70000):
        assert wire.array_length(msgspec.msgpack.encode([None] * n)) == n
    assert wire.array_length(msgspec.msgpack.encode(None)) == -1
    assert wire.array_length(msgspec.msgpack.encode({"a": 1})) == -2
    assert wire.array_length(b"") == -2


def test_keep_stop_ids_leave_a_tool_call_closer_in_the_text() -> None:
    """SGLang keeps its tool parser's one-token call closer when it stops a request: the
    shard is handed a finish without `matched` for such an id, and for a list of ids."""
    from sglang_tok.finish import Length, Stop
    from sglang_tok.protocols.sglang.reader import SglangReader
    from sglang_tok.protocols.sglang.workers import WorkerMap

    positions = Positions(builtin())
    reader = SglangReader(positions, 512, 4096, frozenset({200012}), WorkerMap())
    assert reader._for_shard(Stop(200012)) == Stop()
    assert reader._for_shard(Stop(1)) == Stop(1)
    assert reader._for_shard(Stop([1, 2])) == Stop()
    assert reader._for_shard(Stop("END")) == Stop("END")
    assert reader._for_shard(Length(3)) == Length(3)
