"""The service as SGLang's detokenizer, on SGLang's own messages: for every golden case and
every request, the same rows as SGLang's DetokenizerManager replied (every passed-through
field, row by row, and the finish), texts that add up to the full decode, each reply on the
socket of the request's tokenizer worker; with 1 and 2 shards, through the real service."""

from __future__ import annotations

import msgspec
import pytest
from sglang_cases import CASES, MANIFEST, SglangService, token_ids_message


@pytest.mark.parametrize("case", CASES)
def test_golden_case_rows_as_sglang(sglang_service: SglangService, case: str) -> None:
    s = sglang_service
    spec = MANIFEST["cases"][case]
    msgs, ref = s.case(case)
    s.side.clear()
    for msg in msgs:
        s.send(msg)
    assert s.side.wait(spec["exact"], timeout=30), s.svc.logs()
    for rid, exact in spec["exact"].items():
        ours = s.side.rows[rid]
        assert s.side.text(rid) == exact, rid
        assert len(ours) == len(ref[rid]), rid  # one reply row per scheduler row
        for k, (got, want) in enumerate(zip(ours, ref[rid])):
            del got["output_strs"], want["output_strs"]  # per-row texts may differ
            assert got == want, (rid, k)
        where = s.side.where[rid]
        wants = {row["http_worker_ipcs"] for row in ref[rid]}
        assert set(where) == ({None} if wants == {None} else wants), rid


def test_texts_never_end_in_a_broken_character(sglang_service: SglangService) -> None:
    """No reply row ends in U+FFFD where the full decode has none (SGLang holds back an
    incomplete character too: this pins that the service does at least as well)."""
    s = sglang_service
    spec = MANIFEST["cases"]["random"]
    msgs, _ = s.case("random")
    s.side.clear()
    for msg in msgs:
        s.send(msg)
    assert s.side.wait(spec["exact"], timeout=30)
    for rid, exact in spec["exact"].items():
        sent = ""
        for row in s.side.rows[rid]:
            sent += row["output_strs"]
            assert exact.startswith(sent), rid


def test_pickled_fields_pass_whole_or_not_at_all(sglang_service: SglangService) -> None:
    """`time_stats` and `customized_info` are SGLang pickles of every row: a reply holding
    every row of the message passes them on byte for byte; a part of a message cut across
    shards or workers carries nil (never another row's pickle)."""
    s = sglang_service
    pickle_of = ("PickleWrapper", b"\x80\x05opaque")
    wrapped = msgspec.Raw(msgspec.msgpack.encode(list(pickle_of)))
    workers = list(s.where.values())
    s.side.clear()
    one = [{"rid": "pk-alone", "ids": [19923], "finish": {"type": "length", "length": 1}}]
    s.send(token_ids_message(one, time_stats=wrapped, customized_info=wrapped))
    many = [{"rid": f"pk-{k}", "ids": [19923], "ipc": workers[k % 2],
             "finish": {"type": "length", "length": 1}} for k in range(16)]
    s.send(token_ids_message(many, time_stats=wrapped, customized_info=wrapped))
    assert s.side.wait(["pk-alone", *(r["rid"] for r in many)], timeout=20)
    row = s.side.rows["pk-alone"][0]
    assert row["time_stats"] == row["customized_info"] == list(pickle_of)
    for r in many:
        got = s.side.rows[r["rid"]][0]
        assert got["time_stats"] is None and got["customized_info"] is None, r["rid"]
        assert s.side.text(r["rid"]) == "Hello"
