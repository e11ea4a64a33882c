"""Wire codecs: the golden SGLang frames, every malformed-BATCH reason, round trips."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_tok.protocols.model import control, deltas
from sglang_tok.protocols.model.batch import decode_batch, encode_batch
from sglang_tok.protocols.model.errors import FrameError

GOLDEN = Path(__file__).parent.parent / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
ALIASES = {"logprobs": "output_logprobs", "top_logprobs": "output_top"}


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def norm(v: Any) -> Any:
    if isinstance(v, float):
        return f32(v)
    if isinstance(v, list):
        return [norm(x) for x in v]
    return v


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_frames_decode_to_their_rows(name: str) -> None:
    entry = MANIFEST[name]
    batch = decode_batch((GOLDEN / entry["file"]).read_bytes())
    assert len(batch) == len(entry["rows"])
    for i, want in enumerate(entry["rows"]):
        got = batch.row(i)
        for key, value in want.items():
            assert norm(got[ALIASES.get(key, key)]) == norm(value), (name, i, key)


def test_shard_of_is_stable_across_runs() -> None:
    from egress.router import shard_of
    assert [shard_of(r, 4) for r in ("r0", "r1", "req-2#00000000deadbeef")] == [
        __import__("zlib").crc32(r.encode()) % 4 for r in ("r0", "r1", "req-2#00000000deadbeef")]


rows_strategy = st.lists(st.fixed_dictionaries(
    {"rid": st.text(min_size=1, max_size=8), "ids": st.lists(st.integers(-2**63, 2**63 - 1), max_size=5)},
    optional={"finish": st.sampled_from([None, {"type": "length", "length": 3},
                                         {"type": "stop", "matched": "x"}]),
              "output_logprobs": st.lists(st.tuples(st.floats(width=32, allow_nan=False),
                                                    st.integers(-2**31, 2**31 - 1)).map(list), max_size=3),
              "output_top": st.lists(st.one_of(st.none(), st.lists(
                  st.tuples(st.floats(width=32, allow_nan=False),
                            st.integers(-2**31, 2**31 - 1)).map(list), min_size=1, max_size=3)),
                  max_size=3),
              "output_hidden": st.lists(st.lists(st.floats(width=32, allow_nan=False), max_size=3),
                                        max_size=2),
              "decode_latencies": st.floats(allow_nan=False)}), max_size=8)


@settings(max_examples=200, deadline=None)
@given(rows=rows_strategy)
def test_encode_decode_round_trips_for_any_rows(rows: list[dict[str, Any]]) -> None:
    batch = decode_batch(encode_batch(rows))
    assert len(batch) == len(rows)
    for i, want in enumerate(rows):
        got = batch.row(i)
        for key, value in want.items():
            if key in ("output_top", "output_hidden"):  # a position of k = 0 is null
                value = [pos or None for pos in value]
            if key == "finish" or value or key in got:
                assert got.get(key) == value, (i, key)


def _frame(cols: list[Any], data: bytes = b"") -> bytes:
    head = msgspec.msgpack.encode(cols)
    return b"\x02" + struct.pack("<I", len(head)) + head + data


BASE = [["a", "b"], [None, None], [1, 1], [1, 0], [0, 0], [0, 0]]
IDS = struct.pack("<q", 5)


@pytest.mark.parametrize("frame,reason,rids", [
    (b"\x02\x01", "truncated", []),
    (b"\x02\xff\x00\x00\x00abc", "truncated", []),
    (_frame(BASE, IDS + b"\x00"), "data_length", ["a", "b"]),
    (_frame(BASE, b""), "data_length", ["a", "b"]),
    (_frame([["a", "b"], [None], [1, 1], [1, 0], [0, 0], [0, 0]], IDS), "columns", ["a", "b"]),
    (_frame([["a", "b"], [None, None], [1, 1], [1, -1], [0, 0], [0, 0]], IDS), "header", ["a", "b"]),
    (_frame([["a", 7], [None, None], [1, 1], [1, 0], [0, 0], [0, 0]], IDS), "header", ["a"]),
    (_frame([["a", ""], [None, None], [1, 1], [1, 0], [0, 0], [0, 0]], IDS), "header", ["a"]),
    (_frame([["a", "b"], [None, {"type": "weird"}], [1, 1], [1, 0], [0, 0], [0, 0]], IDS),
     "finish", ["a", "b"]),
    # a finish `type` that is not a string (unhashable or not) is a bad finish reason too
    (_frame([["a", "b"], [None, {"type": [[[]]]}], [1, 1], [1, 0], [0, 0], [0, 0]], IDS),
     "finish", ["a", "b"]),
    (_frame([["a", "b"], [{"type": {"x": 1}}, None], [1, 1], [1, 0], [0, 0], [0, 0]], IDS),
     "finish", ["a", "b"]),
    (_frame([["a", "b"], [{"type": 7}, None], [1, 1], [1, 0], [0, 0], [0, 0]], IDS),
     "finish", ["a", "b"]),
    # a known type whose fields are not SGLang's forms, and an empty map
    (_frame([["a", "b"], [{"type": "length", "length": "3"}, None], [1, 1], [1, 0], [0, 0],
             [0, 0]], IDS), "finish", ["a", "b"]),
    (_frame([["a", "b"], [None, {"type": "stop", "matched": None}], [1, 1], [1, 0], [0, 0],
             [0, 0]], IDS), "finish", ["a", "b"]),
    (_frame([["a", "b"], [None, {}], [1, 1], [1, 0], [0, 0], [0, 0]], IDS), "finish", ["a", "b"]),
    # the columns are checked first, and the rids
    (_frame([["a", "b"], [None, {"type": "weird"}], [1, 1], [1], [0, 0], [0, 0]], IDS),
     "columns", ["a", "b"]),
    (_frame([["a", ""], [None, {"type": "weird"}], [1, 1], [1, 0], [0, 0], [0, 0]], IDS),
     "header", ["a"]),
    (_frame([["a", "b"], [None, {"type": "weird"}], [1, -1], [1, 0], [0, 0], [0, 0]], IDS),
     "header", ["a", "b"]),
    (_frame([["a", "b"], [None, None], [1, 1], [1, 0], [0, 0], [0, 0], [], [], [1, 0], []], IDS),
     "ragged", ["a", "b"]),
    (_frame([["a", "b"], [None, None], [1, 1], [1, 0], [0, 0], [0, 0], [], [], [], [2]], IDS),
     "ragged", ["a", "b"]),
    (_frame([["a", "b"], [None, None], [1, 1], [1, 0], [0, 0], [0, 0], [1]], IDS), "columns",
     ["a", "b"]),
    (_frame(BASE + [[]] * 12 + [[1]], IDS), "columns", ["a", "b"]),
    (b"\x02\x05\x00\x00\x00\xc1\xc1\xc1\xc1\xc1", "header", []),
])
def test_every_malformed_batch_reason(frame: bytes, reason: str, rids: list[str]) -> None:
    with pytest.raises(FrameError) as err:
        decode_batch(frame)
    assert err.value.reason == reason
    assert err.value.rids == rids


def test_limits_name_themselves() -> None:
    with pytest.raises(FrameError) as err:
        decode_batch(encode_batch([{"rid": "x" * 10, "ids": [1]}]), 5)
    assert err.value.reason == "limit_rid_length" and "--max-rid-length" in err.value.detail
    with pytest.raises(FrameError) as err:
        decode_batch(encode_batch([{"rid": "x", "ids": [1] * 10}]), 0, 4)
    assert err.value.reason == "limit_row_ids" and err.value.rids == ["x"]


def test_control_frames_round_trip_and_reject_bad_bodies() -> None:
    for msg in (control.Result("r", b"\x00payload"), control.Error("r", "boom"),
                control.Open("r", stop=["a"], prompt_ids=[1, 2], attribution=True),
                control.Abort(["a", "b"]), control.Ping(-3)):
        assert control.decode_control(control.encode_control(msg)) == msg
    with pytest.raises(FrameError) as err:
        control.decode_control(b"\x4f" + msgspec.msgpack.encode({"rid": "q", "stop": 5}))
    assert err.value.reason == "body" and err.value.rids == ["q"]
    with pytest.raises(FrameError) as err:
        control.decode_control(b"\x41" + msgspec.msgpack.encode({"rids": ["a", 3]}))
    assert err.value.rids == ["a"]
    with pytest.raises(FrameError) as err:
        control.decode_control(b"\x99")
    assert err.value.reason == "unknown_tag"
    # unknown OPEN keys are ignored: fields can be appended to the protocol
    assert control.decode_control(b"\x4f" + msgspec.msgpack.encode({"rid": "q", "new": 1})).rid == "q"


def test_delta_omits_default_keys() -> None:
    raw = deltas.encode_deltas(deltas.Deltas(0, 0, [deltas.Delta("r")]))
    assert msgspec.msgpack.decode(raw[1:]) == {"shard": 0, "seq": 0, "deltas": [{"rid": "r"}]}
