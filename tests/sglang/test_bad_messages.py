"""Bad scheduler messages in `--protocol sglang`, as the native protocol answers bad frames:
the message is dropped whole and counted by reason, every rid still readable from it gets
a last row with an abort finish (so the TokenizerManager ends it), and the service goes on
serving exactly."""

from __future__ import annotations

import pickle
import time

import msgspec
import pytest
from sglang_cases import MANIFEST, SglangService, token_ids_message

from sglang_tok.protocols.model.errors import MALFORMED_FRAME
from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import builtin


def _fields(msg: bytes) -> list[msgspec.Raw]:
    return msgspec.msgpack.decode(msg, type=list[msgspec.Raw])


def _with_field(msg: bytes, index: int, value: object) -> bytes:
    fields = _fields(msg)
    fields[index] = msgspec.Raw(msgspec.msgpack.encode(value))
    return msgspec.msgpack.encode(fields)


def _good(rid: str) -> bytes:
    return token_ids_message([{"rid": rid, "ids": [19923, 14]}])


BAD: dict[str, tuple[str, bytes, list[str]]] = {
    # (reason counted, message, rids that must get an abort row)
    "wrong tag": ("unknown_tag", _with_field(_good("bad-tag"), 0, "BatchFooOutput"),
                  ["bad-tag"]),
    "too many fields": ("columns", msgspec.msgpack.encode(
        [*_fields(_good("bad-count")), *[None] * len(builtin().token_ids)]), ["bad-count"]),
    "a map, not an array": ("header", msgspec.msgpack.encode({"rids": ["x"]}), []),
    "garbage": ("header", b"\xc1\xff garbage \x00", []),
    "pickle IPC": ("header", pickle.dumps({"rids": ["p"]}), []),
    "short column": ("columns", _with_field(
        token_ids_message([{"rid": "bad-len-0", "ids": [14]}, {"rid": "bad-len-1", "ids": [14]}]),
        1 + builtin().token_ids.index("read_offsets"), [0]), ["bad-len-0", "bad-len-1"]),
    "wrong type": ("header", _with_field(_good("bad-type"), 1 + builtin().token_ids.index(
        "completion_tokens"), ["one"]), ["bad-type"]),
    "ids not integers": ("header", _with_field(_good("bad-ids"), 1 + builtin().token_ids.index(
        "decode_ids"), [msgspec.msgpack.Ext(1, b"\x00\x00\x00\x02\xa1d" + b"\x00" * 8)]),
        ["bad-ids"]),
    "unknown finish": ("finish", _with_field(_good("bad-fin"), 1 + builtin().token_ids.index(
        "finished_reasons"), [{"type": "exploded"}]), ["bad-fin"]),
    "finish not of the forms": ("finish", _with_field(_good("bad-form"), 1 + builtin().token_ids
        .index("finished_reasons"), [{"type": "length", "length": "3"}]), ["bad-form"]),
}


def _dropped(s: SglangService, reason: str) -> float:
    return s.svc.metrics().get(f'sglang_tok_frames_dropped_total{{reason="{reason}"}}', 0.0)


@pytest.mark.parametrize("name", list(BAD))
def test_bad_message_is_dropped_counted_and_its_rids_told(sglang_service: SglangService,
                                                          name: str) -> None:
    s = sglang_service
    reason, msg, rids = BAD[name]
    before = _dropped(s, reason)
    s.side.clear()
    s.send(msg)
    assert s.side.wait(rids, timeout=15), (name, s.side.rows)
    for rid in rids:
        fin = s.side.finish(rid)
        assert fin["type"] == "abort" and fin["message"] == MALFORMED_FRAME, (rid, fin)
        assert s.side.text(rid) == ""
    deadline = time.monotonic() + 10
    while _dropped(s, reason) != before + 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _dropped(s, reason) == before + 1, name
    # and the service goes on: a golden case, exact
    spec = MANIFEST["cases"]["plain"]
    msgs, _ = s.case("plain")
    fresh = {m: m.replace(b"\xa2p", b"\xa2q") for m in msgs}  # rids p0.. -> q0..: new requests
    for m in msgs:
        s.send(fresh[m])
    want = {"q" + rid[1:]: text for rid, text in spec["exact"].items()}
    assert s.side.wait(want, timeout=20)
    assert {rid: s.side.text(rid) for rid in want} == want


def test_rows_after_a_bad_message_for_its_rids_are_late(sglang_service: SglangService) -> None:
    """A rid ended by a dropped message stays ended: the scheduler's later rows for it are
    ignored (a TokenizerManager that ended it would only log them)."""
    s = sglang_service
    s.side.clear()
    s.send(_with_field(_good("gone"), 0, "NotAMessage"))
    assert s.side.wait(["gone"], timeout=15)
    s.send(token_ids_message([{"rid": "gone", "ids": [14], "completion": 3},
                              {"rid": "still-here", "ids": [19923]}]))
    s.send(token_ids_message([{"rid": "still-here", "ids": [14], "completion": 2,
                               "finish": {"type": "length", "length": 2}}]))
    assert s.side.wait(["still-here"], timeout=15)
    assert len(s.side.rows["gone"]) == 1


def test_idle_batch_and_control_messages_are_taken(sglang_service: SglangService) -> None:
    """What else SGLang's scheduler sends the detokenizer: idle batches (no rows), the GC
    freeze and logging controls. None is a malformed frame; none is answered."""
    s = sglang_service
    settled = s.settled_metrics()  # earlier tests' drops are in
    drops = 'sglang_tok_frames_dropped_total{{reason="{}"}}'.format
    before = settled.get(drops("header"), 0.0) + settled.get(drops("unknown_tag"), 0.0)
    s.side.clear()
    s.send(wire.encode_token_ids({"rids": []}))
    s.send(msgspec.msgpack.encode(["FreezeGCReq", None, None, [700, 10, 10]]))
    s.send(msgspec.msgpack.encode(["ConfigureLoggingReq", None, None, None, None, None, "info"]))
    s.send(_good("after-controls"))
    s.send(token_ids_message([{"rid": "after-controls", "ids": [2058], "completion": 3,
                               "finish": {"type": "length", "length": 3}}]))
    assert s.side.wait(["after-controls"], timeout=15)
    assert s.side.text("after-controls") == "Hello, world"
    settled = s.settled_metrics()
    assert settled.get(drops("header"), 0.0) + settled.get(drops("unknown_tag"), 0.0) == before
    assert set(s.side.rows) == {"after-controls"}


def test_an_unknown_request_seen_mid_stream_ends_instead_of_losing_its_start(
        sglang_service: SglangService) -> None:
    """A row whose rid the service never saw and which is not its request's first (its
    completion_tokens count more ids than it carries: the service started after the
    request did) ends that request with an abort: never text without its beginning."""
    s = sglang_service
    s.side.clear()
    s.send(token_ids_message([{"rid": "mid-stream", "ids": [2058], "completion": 7},
                              {"rid": "from-start", "ids": [19923]}]))
    s.send(token_ids_message([{"rid": "mid-stream", "ids": [3], "completion": 8},
                              {"rid": "from-start", "ids": [14], "completion": 2,
                               "finish": {"type": "length", "length": 2}}]))
    assert s.side.wait(["mid-stream", "from-start"], timeout=15)
    fin = s.side.finish("mid-stream")
    assert fin["type"] == "abort" and "first rows" in fin["message"], fin
    assert s.side.text("mid-stream") == ""
    assert len(s.side.rows["mid-stream"]) == 1
    assert s.side.text("from-start") == "Hello,"


def test_a_bad_row_ends_its_own_request_not_the_message(sglang_service: SglangService) -> None:
    """A rid over --max-rid-length (clients choose rids in SGLang) ends that request with
    an abort row; the other rows of the same message decode as usual."""
    s = sglang_service
    long_rid = "x" * 600
    rows = [{"rid": long_rid, "ids": [19923]}, {"rid": "beside-0", "ids": [19923]},
            {"rid": "beside-1", "ids": [19923]}]
    s.side.clear()
    s.send(token_ids_message(rows))
    s.send(token_ids_message([{**r, "ids": [14], "completion": 2,
                               "finish": {"type": "length", "length": 2}} for r in rows]))
    assert s.side.wait([long_rid, "beside-0", "beside-1"], timeout=15)
    fin = s.side.finish(long_rid)
    assert fin["type"] == "abort" and "--max-rid-length" in fin["message"], fin
    assert len(s.side.rows[long_rid]) == 1
    assert s.side.text("beside-0") == s.side.text("beside-1") == "Hello,"


def test_deep_health_answers_in_this_protocol(sglang_service: SglangService) -> None:
    """/health?deep=1 PINGs every process through the input ring; in this protocol the
    egress takes that probe too, and no PONG reaches SGLang's socket."""
    s = sglang_service
    s.side.clear()
    code, body = s.svc.get("/health?deep=1")
    assert code == 200, body
    s.side.poll(0.5)
    assert s.side.messages == 0 or not s.side.rows
