"""The service as SGLang's detokenizer, on SGLang's own messages: for every golden case and
every request, the same rows as SGLang's DetokenizerManager replied (every passed-through
field, row by row, and the finish), texts that add up to the full decode, each reply on the
socket of the request's tokenizer worker; with 1 and 2 shards, through the real service."""

from __future__ import annotations

import pytest
from sglang_cases import CASES, MANIFEST, SglangService


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
