"""The stand-in's parts that the serving modes need, without SGLang: speculative counters
on every row (SGLang's TokenizerManager indexes them per row and hangs on empty ones), the
step grid after an idle spell, each rank's load snapshot, streams keyed by prompt, the
rank told to shut down finding its sibling ranks, and meta_info compared clocks aside."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from sglang_tok_standin.core import Core, wire_beams
from sglang_tok_standin.grid import StepGrid
from sglang_tok_standin.loads import TITLE, peers, snapshot_fields
from sglang_tok_standin.requests import Ask, Sampling
from sglang_tok_standin.streams import Synthetic
from sglang_tok_testkit.serving_modes import MODES, is_clock, meta_differences

CORPUS = [list(range(100, 400))]
EOS = 2


def _core(speculative: bool, per_step: int = 3) -> Core:
    return Core(Synthetic(CORPUS, EOS, length=50, spread=0, ids_per_step=per_step), None,
                frozenset([EOS]), 1000, wire_beams, speculative=speculative)


def _ask(rid: str, stream: bool = True, max_new: int = 10) -> Ask:
    return Ask(rid=rid, input_ids=(5, 6, 7), stream=stream,
               sampling=Sampling(max_new_tokens=max_new, ignore_eos=True))


def test_speculative_counters_go_on_every_row() -> None:
    core = _core(True)
    core.add(_ask("a"))
    core.add(_ask("b", stream=False))
    rows: list[dict[str, object]] = []
    while core.busy:
        cols = core.step()
        if cols is not None:
            n = len(cols["rids"])
            for name in ("spec_verify_ct", "spec_num_correct_drafts",
                         "spec_correct_drafts_histogram", "spec_num_cap_tokens"):
                assert len(cols[name]) == n, name  # one per row, never empty
            rows += [dict(zip(("rid", "ct", "ok", "hist"),
                              (cols["rids"][i], cols["spec_verify_ct"][i],
                               cols["spec_num_correct_drafts"][i],
                               cols["spec_correct_drafts_histogram"][i])))
                     for i in range(n)]
    last = {r["rid"]: r for r in rows}
    # 10 ids: 1 from the prefill, then 3 verify steps of 3 (2 drafts accepted each)
    assert last["a"]["ct"] == last["b"]["ct"] == 3
    assert last["a"]["ok"] == 6 and last["a"]["hist"] == [0, 0, 3]
    assert rows[0]["ct"] == 0  # the first row: the prefill only


def test_not_speculative_the_columns_stay_empty() -> None:
    core = _core(False, per_step=1)
    core.add(_ask("a"))
    cols = core.step()
    assert cols is not None and cols["spec_verify_ct"] == []


def test_the_step_grid_starts_again_after_an_idle_spell() -> None:
    grid = StepGrid(0.02)
    assert grid.due(10.0)
    grid.stepped(10.0)
    assert not grid.due(10.01) and abs(grid.wait_s(10.01) - 0.01) < 1e-9
    assert grid.due(10.02)
    grid.stepped(10.02)
    grid.idle()  # no request for a while; one arrives at 11.7
    assert grid.due(11.7)
    grid.stepped(11.7)
    # the request's second step is a step later, not at once
    assert not grid.due(11.7) and abs(grid.wait_s(11.7) - 0.02) < 1e-9
    # a step slower than the grid: the next is due at once, not a burst of catching up
    grid.stepped(11.9)
    assert grid.next == 11.9
    zero = StepGrid(0)
    assert zero.due(1.0)
    zero.stepped(1.0)
    assert zero.wait_s(1.0) == 0


def test_a_load_snapshot_counts_running_and_waiting() -> None:
    core = _core(False, per_step=1)
    core.max_running = 1
    core.add(_ask("a"))
    core.add(_ask("b"))
    core.step()
    snap = snapshot_fields(core, dp_rank=1, max_total_tokens=99)
    assert snap["dp_rank"] == 1 and snap["num_running_reqs"] == 1
    assert snap["num_waiting_reqs"] == 1 and snap["max_running_requests"] == 1
    later = snapshot_fields(core, 1, 99)
    assert later["timestamp"] >= snap["timestamp"]


def test_streams_by_prompt_do_not_follow_arrival() -> None:
    by_prompt = Synthetic(CORPUS, EOS, 20, by_prompt=True)
    by_arrival = Synthetic(CORPUS, EOS, 20)
    ask = _ask("x")

    def first(source: Synthetic, index: int) -> list[int]:
        chunks = source.stream(ask, index).chunks
        return [t for _ in range(10) for t in next(chunks) or []]

    assert first(by_prompt, 0) == first(by_prompt, 7)
    assert first(by_arrival, 0) != first(by_arrival, 7)


def test_the_rank_told_to_stop_finds_its_sibling_ranks() -> None:
    """Children of one parent carrying the stand-in's title are its peers; others not."""
    code = ("import setproctitle, sys, time; setproctitle.setproctitle(sys.argv[1]); "
            "time.sleep(30)")
    try:
        import setproctitle  # noqa: F401
    except ImportError:
        code = "import time; time.sleep(30)"
    procs = [subprocess.Popen([sys.executable, "-c", code, title])
             for title in (TITLE, TITLE, "something else")]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(peers(procs[0].pid)) < 1:
            time.sleep(0.05)
        found = peers(procs[0].pid)
        if "setproctitle" in code:
            assert found == [procs[1].pid]
        assert procs[2].pid not in found and os.getpid() not in found
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_meta_info_is_compared_key_by_key_clocks_aside() -> None:
    a = {"id": "x", "e2e_latency": 1.0, "request_received_ts": 5.0, "completion_tokens": 3,
         "queue_time": 0.1, "finish_reason": {"type": "length"}}
    b = {**a, "id": "y", "e2e_latency": 2.0, "request_received_ts": 6.0, "queue_time": 0.2}
    assert meta_differences(a, b) == []
    del b["queue_time"]
    b["completion_tokens"] = 4
    assert meta_differences(a, b) == ["queue_time: only stock has it",
                                      "completion_tokens: 3 != 4"]
    assert is_clock("forward_entry_time") and not is_clock("cached_tokens")
    assert len({m.name for m in MODES}) == len(MODES)


def test_a_decode_servers_lost_transfer_is_aborted_before_any_output() -> None:
    """sglang_tok_abort_first: the request's one row has no ids and an abort finish (status
    500), as a PD decode server's scheduler sends it when the KV cache never arrived; a
    request beside it runs as usual."""
    import msgspec

    core = _core(False, per_step=1)
    core.add(msgspec.structs.replace(_ask("lost"), abort_first=True))
    core.add(_ask("kept", max_new=3))
    seen: dict[str, list[tuple[object, object]]] = {}
    while core.busy:
        cols = core.step()
        if cols is None:
            continue
        for i, rid in enumerate(cols["rids"]):
            ids = list(cols["decode_ids"][i])[cols["read_offsets"][i]:]  # after the context
            seen.setdefault(rid, []).append((ids, cols["finished_reasons"][i]))
    (ids, fin), = seen["lost"]
    assert ids == [] and isinstance(fin, dict) and fin["type"] == "abort"
    assert fin["status_code"] == 500 and "KV cache" in fin["message"]
    assert seen["kept"][-1][1] is not None and len(seen["kept"]) == 3
