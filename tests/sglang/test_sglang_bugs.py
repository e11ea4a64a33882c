"""Where SGLang 0.5.23's detokenizer is wrong, the service is exact, on the same messages.

Each case is a bug SGLang's users reported; where a python that imports SGLang exists
(`sglang_cases.sglang_python`), SGLang's own DetokenizerManager runs the same messages
(`sglang_reference.py`) and the test also shows the bug is there."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sglang_cases import SglangService, sglang_python, token_ids_message

from sglang_tok.tokenizer import load

HERE = Path(__file__).resolve().parent
TOK = load("deepseek-v4").tokenizer


def _rows(rid: str, chunks: list[list[int]], finish: dict[str, Any],
          **extra: Any) -> list[bytes]:
    """One message per chunk, as the scheduler streams one request."""
    out, done = [], 0
    for k, ids in enumerate(chunks):
        done += len(ids)
        last = k == len(chunks) - 1
        out.append(token_ids_message([{"rid": rid, "ids": ids, "completion": done,
                                       "finish": finish if last else None, **extra}]))
    return out


def _run(s: SglangService, msgs: list[bytes], rids: list[str]) -> dict[str, str]:
    s.side.clear()
    for m in msgs:
        s.send(m)
    assert s.side.wait(rids, timeout=20), s.svc.logs()
    return {rid: s.side.text(rid) for rid in rids}


def _sglang(tmp: Path, msgs: list[bytes]) -> dict[str, Any] | None:
    python = sglang_python()
    if python is None:
        return None
    path = tmp / "msgs.bin"
    path.write_bytes(b"".join(struct.pack("<I", len(m)) + m for m in msgs))
    run = subprocess.run([python, str(HERE / "sglang_reference.py"), str(path)],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_stop_string_that_also_occurs_earlier_is_cut_at_the_match(
        sglang_service: SglangService, tmp_path: Path) -> None:
    """sglang#33151: SGLang trims a matched stop string at its first occurrence in the
    text, so text before the match is lost when the stop string also occurs earlier."""
    ids = TOK.encode("Say STOP, then STOP", add_special_tokens=False).ids
    fin = {"type": "stop", "matched": "STOP"}
    msgs = _rows("stop-one-row", [ids], fin) + _rows("stop-rows", [ids[:2], ids[2:-1], ids[-1:]],
                                                     fin)
    got = _run(sglang_service, msgs, ["stop-one-row", "stop-rows"])
    assert got == {"stop-one-row": "Say STOP, then ", "stop-rows": "Say STOP, then "}
    ref = _sglang(tmp_path, msgs)
    if ref is not None:
        assert ref["texts"] == {"stop-one-row": "Say ", "stop-rows": "Say STOP, then"}


def test_no_character_twice_when_the_printable_prefix_shrinks(
        sglang_service: SglangService, tmp_path: Path) -> None:
    """sglang#31598: a CJK character and the first bytes of an emoji in one row, then the
    emoji's end and the first bytes of another: SGLang's printable prefix shrinks between
    the two incomplete rows and it sends the CJK character again."""
    chunks = [[853, 3574], [102, 105, 3574], [107, 257]]  # 好 🦩 🫠, cut mid-character
    exact = TOK.decode(sum(chunks, []))
    assert exact == "好🦩🫠"
    msgs = _rows("shrink", chunks, {"type": "length", "length": 7})
    assert _run(sglang_service, msgs, ["shrink"]) == {"shrink": exact}
    ref = _sglang(tmp_path, msgs)
    if ref is not None:
        assert ref["texts"] == {"shrink": "好好🦩🫠"}


@pytest.mark.parametrize("filler", ["broken bytes", "skipped specials"])
def test_a_long_run_of_rows_without_text_is_exact_and_holds_no_window(
        sglang_service: SglangService, tmp_path: Path, filler: str) -> None:
    """sglang#34740, #13275: after a row whose text ends in U+FFFD, or decodes to "" (a
    skipped special token), SGLang advances none of its offsets, so every later row
    decodes the whole run again (a window that grows with the run). The service decodes
    each id once; its text is the full decode's."""
    run = [3574] * 300 if filler == "broken bytes" else [1] * 300  # lone lead bytes / EOS
    chunks = [[19923]] + [[i] for i in run] + [[2058]]
    msgs = _rows(f"run-{filler}", chunks, {"type": "length", "length": len(chunks)})
    got = _run(sglang_service, msgs, [f"run-{filler}"])
    assert got == {f"run-{filler}": TOK.decode(sum(chunks, []))}
    ref = _sglang(tmp_path, msgs)
    if ref is not None:
        assert ref["window"][f"run-{filler}"] >= len(run)


def test_rows_go_to_shards_by_rid_not_by_tokenizer_worker(sglang_service: SglangService) -> None:
    """sglang#29366: SGLang's detokenizer router hashes `http_worker_ipc`, so with fewer
    tokenizer workers than detokenizers some detokenizers never work. Here every request
    names one worker, and each shard still gets its share (rid hash)."""
    s = sglang_service
    ipc = next(iter(s.where.values()))
    rows = 'sglang_tok_rows_total{{shard="{}"}}'.format
    before = s.settled_metrics()
    rids = [f"one-worker-{k}" for k in range(32)]
    s.side.clear()
    s.send(token_ids_message([{"rid": r, "ids": [19923], "ipc": ipc} for r in rids]))
    s.send(token_ids_message([{"rid": r, "ids": [14], "ipc": ipc, "completion": 2,
                               "finish": {"type": "length", "length": 2}} for r in rids]))
    assert s.side.wait(rids, timeout=20)
    assert all(s.side.where[r] == [ipc, ipc] for r in rids)
    after = s.settled_metrics()
    got = [after.get(rows(k), 0.0) - before.get(rows(k), 0.0) for k in range(s.svc.shards)]
    assert sum(got) == 2 * len(rids) and all(got), got
