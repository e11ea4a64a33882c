"""The field capacity model (dp 8, 16-32 tokenizer workers) from per-id costs measured at
dp 2: which stage it names the wall, how it scales a measurement, what it refuses, and
the ratios and goal lines it prints. No SGLang needed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sglang_tok_bench import capacity_model as cm
from sglang_tok_bench.capacity import CORES, Stage, capacity
from sglang_tok_bench.sglang_server import Run, between, field_model, rank_files
from sglang_tok_standin.config import for_rank

US = 1e-6
# a dp 2, 2-worker measurement: 40 µs/id per tokenizer worker stage, 8 in the router,
# 2 in the DataParallelController; the detokenizers' own costs below
COMMON = {"router": Stage(1, 8 * US), "tm workers": Stage(2, 40 * US),
          "dp controller": Stage(1, 2 * US)}
STOCK_X1 = {**COMMON, "detok": Stage(1, 30 * US)}
STOCK_ROUTER = {**COMMON, "detok router": Stage(1, 15 * US), "detok": Stage(2, 30 * US)}
PLUGIN = {**COMMON, "egress": Stage(1, 5 * US), "shards": Stage(2, 20 * US),
          "service aux": Stage(2, 0.1 * US)}
MEASURED = {cm.STOCK_X1: STOCK_X1, cm.STOCK_ROUTER: STOCK_ROUTER, cm.PLUGIN: PLUGIN}


def test_the_wall_is_the_single_process_stage_that_saturates_first() -> None:
    target = cm.Target(dp=8, tm_workers=32, detok_workers=8, cores=1000)
    big = cm.project(STOCK_X1, target, cm.STOCK_X1)
    cap, wall = capacity(big, target.cores, reserved=cm.reserved(target.dp))
    assert wall == "detok" and cap == pytest.approx(1 / (30 * US))
    big = cm.project(STOCK_ROUTER, target, cm.STOCK_ROUTER)
    assert capacity(big, target.cores, reserved=8) == (pytest.approx(1 / (15 * US)),
                                                       "detok router")


def test_the_cores_are_the_wall_when_every_stage_has_room() -> None:
    target = cm.Target(dp=8, tm_workers=32, detok_workers=8, cores=16)
    big = cm.project(PLUGIN, target, cm.PLUGIN)
    cap, wall = capacity(big, 16, reserved=cm.reserved(8))
    total = sum(s.cpu_per_id for n, s in PLUGIN.items() if n != "dp controller")
    assert wall == CORES and cap == pytest.approx(7 / total)
    # each scheduler keeps its core, the DataParallelController one more: dp 8 on 16 cores
    # leaves 7, not 15; without dp only the scheduler's is kept
    assert cm.reserved(8) == 9 and cm.reserved(1) == 1
    assert capacity(big, 16, reserved=1)[0] > cap


def test_projection_scales_workers_and_shards_and_keeps_single_processes() -> None:
    target = cm.Target(dp=8, tm_workers=16, detok_workers=4, cores=64)
    plugin = cm.project(PLUGIN, target, cm.PLUGIN)
    assert plugin["tm workers"] == Stage(16, 40 * US)
    assert plugin["shards"] == Stage(4, 20 * US)
    assert plugin["egress"].processes == plugin["router"].processes == 1
    # the DataParallelController spins a core: a reserved core, not a stage
    assert "dp controller" not in plugin
    assert plugin["service aux"].processes == 1
    stock = cm.project(STOCK_ROUTER, target, cm.STOCK_ROUTER)
    assert stock["detok"] == Stage(4, 30 * US) and stock["detok router"].processes == 1
    # stock x1 is one detokenizer whatever N the target names
    assert cm.project(STOCK_X1, target, cm.STOCK_X1)["detok"].processes == 1


def test_projection_refuses_what_it_cannot_read_the_target_from() -> None:
    target = cm.Target(dp=8, tm_workers=16, detok_workers=8, cores=64)
    one_tm = {"http+tm": Stage(1, 50 * US), "dp controller": Stage(1, 2 * US),
              "detok": Stage(1, 30 * US)}
    with pytest.raises(ValueError, match="tokenizer workers"):
        cm.project(one_tm, target, cm.STOCK_X1)
    no_dp = {k: v for k, v in STOCK_X1.items() if k != "dp controller"}
    with pytest.raises(ValueError, match="dp"):
        cm.project(no_dp, target, cm.STOCK_X1)


def test_compare_ratios_and_the_detokenizer_wall() -> None:
    targets = [cm.Target(8, 32, 8, 1000)]
    rows = {r.system: r for r in cm.compare(MEASURED, targets, ids_per_row=1)}
    stock, router, plugin = rows[cm.STOCK_X1], rows[cm.STOCK_ROUTER], rows[cm.PLUGIN]
    assert stock.detokenizer_is_wall and router.detokenizer_is_wall
    assert stock.vs_stock == 1.0 and router.vs_router == 1.0
    # the plugin: its egress (5 µs, 200k/s) and 8 shards (20 µs, 400k/s) have room past
    # the HTTP router's 8 µs (125k/s), which is the wall
    assert plugin.wall == "router" and not plugin.detokenizer_is_wall
    assert plugin.detokenizer == pytest.approx(1 / (5 * US))
    assert plugin.vs_stock == pytest.approx(30 / 8)
    assert plugin.vs_router == pytest.approx(15 / 8)
    assert cm.goal_met([plugin]) == [] == cm.goal_met([plugin], stock_x=3.0, router_x=1.5)


def test_goal_lines_name_what_falls_short() -> None:
    slow_egress = {**PLUGIN, "egress": Stage(1, 25 * US)}
    rows = cm.compare({**MEASURED, cm.PLUGIN: slow_egress}, [cm.Target(8, 32, 8, 1000)], 4)
    short = cm.goal_met(rows)
    assert any("the plugin is the wall (egress)" in s for s in short), short
    assert any("x stock x1 (goal 3.0x)" in s for s in short), short
    assert all("4 ids/row" in s for s in short)


def test_a_ratio_to_a_system_not_measured_is_nan_not_a_failure() -> None:
    rows = cm.compare({cm.PLUGIN: PLUGIN}, [cm.Target(8, 16, 8, 64)], 1)
    assert math.isnan(rows[0].vs_stock) and math.isnan(rows[0].vs_router)
    assert "| - |" in cm.table(rows)


def _run(system: str, dp: int, tw: int, k: int, stages: dict[str, Stage],
         logprobs: float = 0.0) -> Run:
    return Run(system, tw, f"{k}", 0.0, 0.0, 0.0, 0.0, {},
               {n: (s.processes, s.cpu_per_id) for n, s in stages.items()}, 0, 0, 0, 0,
               dp=dp, ids_per_step=k, logprobs=logprobs)


def test_field_model_reads_the_dp_runs_per_ids_per_row() -> None:
    runs = [_run("sglang x1", 2, 2, 1, STOCK_X1), _run("sglang x2", 2, 2, 1, STOCK_ROUTER),
            _run("sglang-tok x2", 2, 2, 1, PLUGIN),
            _run("sglang-tok x2", 2, 2, 3, {**PLUGIN, "egress": Stage(1, 2 * US)}),
            # not the model's: no dp, one tokenizer process, logprobs
            _run("sglang-tok x2", 1, 2, 1, {**PLUGIN, "egress": Stage(1, 99 * US)}),
            _run("sglang-tok x2", 2, 2, 1, {**PLUGIN, "egress": Stage(1, 99 * US)}, 0.05)]
    rows = field_model(runs, [cm.Target(8, 32, 8, 64)])
    by = {(r.ids_per_row, r.system): r for r in rows}
    assert set(by) == {(1, cm.STOCK_X1), (1, cm.STOCK_ROUTER), (1, cm.PLUGIN), (3, cm.PLUGIN)}
    assert by[1, cm.PLUGIN].detokenizer == pytest.approx(1 / (5 * US))
    assert by[3, cm.PLUGIN].detokenizer == pytest.approx(min(1 / (2 * US), 8 / (20 * US)))
    assert field_model(runs[4:], [cm.Target(8, 32, 8, 64)]) == []


def test_the_bench_reads_the_files_each_dp_rank_writes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    assert [str(p) for p in rank_files(path, 3)] == [for_rank(str(path), k) for k in range(3)]
    assert for_rank("", 2) == ""


def test_a_process_read_as_other_at_one_mark_keeps_its_role() -> None:
    """A tokenizer worker whose title read as "other" at the first mark: its CPU in the
    window goes to the worker stage, not its whole CPU since it started."""
    m0 = {1: ("router", 1.0), 2: ("other", 50.0), 3: ("tm workers", 40.0)}
    m1 = {1: ("router", 1.5), 2: ("tm workers", 52.0), 3: ("tm workers", 43.0),
          4: ("egress", 0.25)}
    cpu, count = between(m0, m1)
    assert cpu == {"router": 0.5, "tm workers": 5.0, "egress": 0.25}
    assert count == {"router": 1, "tm workers": 2, "egress": 1}
    cpu, _ = between({2: ("tm workers", 50.0)}, {2: ("other", 51.0)})
    assert cpu == {"tm workers": 1.0}


def test_a_saved_run_models_as_the_measured_one(tmp_path: Path) -> None:
    """`--model-from`: the JSON a run writes gives the same field model as the run did."""
    from sglang_tok_bench.figures import write_json
    from sglang_tok_bench.sglang_server import load_runs

    runs = [_run("sglang x1", 2, 2, 1, STOCK_X1), _run("sglang x2", 2, 2, 1, STOCK_ROUTER),
            _run("sglang-tok x2", 2, 2, 1, PLUGIN)]
    write_json(str(tmp_path / "runs.json"), {"runs": [r.__dict__ for r in runs]})
    targets = [cm.Target(8, 32, 8, 64)]
    assert field_model(load_runs(tmp_path / "runs.json"), targets) == field_model(runs, targets)
