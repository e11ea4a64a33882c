"""The capacity model carried to where the detokenizer wall is met in the field: dp 8 with
16-32 tokenizer workers and speculative steps (sglang#34740), from per-id costs measured
on a small machine (`sglang_server.py` at dp 2, 2 tokenizer workers).

A measured server is its stages' CPU seconds per id (`capacity.Stage`). Projected to a
target, each stage keeps its CPU per id and takes the target's process count: the
tokenizer workers W, stock's detokenizer workers or the plugin's shards N, one of
everything else (the HTTP router, stock's detokenizer router, the plugin's egress: a
single process each, so a wall of its own). The dp ranks' schedulers are reserved a core
each, and SGLang's DataParallelController one more: its event loop polls without blocking
(0.5.23's `event_loop`), a core whatever the load, so its CPU per id measures the window,
not its work, and it is no stage.

That a stage's CPU per id holds at dp 8 rests on each scheduler's batch being the size
measured (a detokenizer's work per id follows the rows per message, which is one
scheduler's batch, not the number of schedulers). Speculative steps are measured, not
scaled: their per-id costs come from runs at 3 or 4 ids per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sglang_tok_bench.capacity import CORES, Stage, capacity
from sglang_tok_bench.figures import markdown, times

# the stages that scale with the target's counts; every other one is a single process
TM_WORKERS = "tm workers"
DETOK_WORKERS = ("detok", "shards")
# the detokenizer's stages, stock's and the plugin's: "the plugin never the wall" is none
# of these setting the capacity
DETOKENIZER = frozenset({"detok router", "detok", "egress", "shards", "service aux"})
STOCK_X1, STOCK_ROUTER, PLUGIN = "stock x1", "stock router+N", "sglang-tok xN"
# processes that spin a core each (their CPU is no cost per id): reserved, not stages
SPINNING = frozenset({"dp controller"})


@dataclass(frozen=True)
class Target:
    dp: int
    tm_workers: int
    detok_workers: int  # stock's behind its router, or the plugin's shards
    cores: int


@dataclass(frozen=True)
class Row:
    target: Target
    ids_per_row: int
    system: str
    capacity: float
    wall: str
    detokenizer: float  # the detokenizer's stages' own capacity, the cores aside
    vs_stock: float  # capacity / stock x1's
    vs_router: float  # capacity / stock router+N's

    @property
    def detokenizer_is_wall(self) -> bool:
        return self.wall in DETOKENIZER


def project(stages: Mapping[str, Stage], target: Target, system: str) -> dict[str, Stage]:
    """A measured server's stages at the target's process counts. Refuses measurements
    the target cannot be read from: one tokenizer process (no worker stage to scale) for
    a target of several, no DataParallelController for a target with dp."""
    if target.tm_workers > 1 and TM_WORKERS not in stages:
        raise ValueError("the target has tokenizer workers; measure with 2 or more")
    if target.dp > 1 and "dp controller" not in stages:
        raise ValueError("the target has dp; measure with --dp-size 2 or more")
    counts: dict[str, int] = {TM_WORKERS: target.tm_workers}
    if system != STOCK_X1:  # stock x1 is one detokenizer whatever the target
        counts.update(dict.fromkeys(DETOK_WORKERS, target.detok_workers))
    return {name: Stage(counts.get(name, 1), s.cpu_per_id) for name, s in stages.items()
            if name not in SPINNING}


def reserved(dp: int) -> int:
    """Cores no stage may use: a scheduler's per dp rank, the DataParallelController's."""
    return dp + (1 if dp > 1 else 0)


def detokenizer_capacity(stages: Mapping[str, Stage]) -> float:
    """The least capacity of the detokenizer's own stages: how much it would stream were
    nothing else in the way."""
    return min((s.capacity for n, s in stages.items() if n in DETOKENIZER),
               default=float("inf"))


def compare(measured: Mapping[str, Mapping[str, Stage]], targets: Iterable[Target],
            ids_per_row: int) -> list[Row]:
    """Per target, each measured system (`STOCK_X1`, `STOCK_ROUTER`, `PLUGIN`, whichever
    were measured) projected: its capacity, its wall, and its ratio to stock's."""
    rows = []
    for target in targets:
        got: dict[str, tuple[float, str, float]] = {}
        for system, stages in measured.items():
            big = project(stages, target, system)
            cap, wall = capacity(big, target.cores, reserved=reserved(target.dp))
            got[system] = (cap, wall, detokenizer_capacity(big))
        for system, (cap, wall, detok) in got.items():
            rows.append(Row(target, ids_per_row, system, cap, wall, detok,
                            _ratio(cap, got.get(STOCK_X1)), _ratio(cap, got.get(STOCK_ROUTER))))
    return rows


def _ratio(cap: float, base: tuple[float, str, float] | None) -> float:
    return cap / base[0] if base and base[0] > 0 else float("nan")


def goal_met(rows: Iterable[Row], stock_x: float = 3.0, router_x: float = 1.5) -> list[str]:
    """Issue 42's goal per plugin row: the plugin never the wall, at least `stock_x` stock
    x1's capacity and `router_x` stock router+N's. What falls short, one line each."""
    short = []
    for r in rows:
        if r.system != PLUGIN:
            continue
        t = r.target
        where = (f"dp {t.dp}, {t.tm_workers} TM workers, {t.detok_workers} shards, "
                 f"{r.ids_per_row} ids/row, {t.cores} cores")
        if r.detokenizer_is_wall:
            short.append(f"{where}: the plugin is the wall ({r.wall})")
        if r.vs_stock < stock_x:
            short.append(f"{where}: {r.vs_stock:.2f}x stock x1 (goal {stock_x}x)")
        if r.vs_router < router_x:
            short.append(f"{where}: {r.vs_router:.2f}x stock router+N (goal {router_x}x)")
    return short


def table(rows: Iterable[Row]) -> str:
    """One line per (target, system): the capacity, the stage that sets it, the
    detokenizer's own capacity, the ratios to stock's two systems."""
    head = ["dp", "TM workers", "detok workers / shards", "ids/row", "cores", "system",
            "capacity ids/s", "wall", "detokenizer's own cap", "x stock x1",
            "x stock router+N"]
    return markdown(head, [[r.target.dp, r.target.tm_workers, r.target.detok_workers,
                            r.ids_per_row, r.target.cores, r.system, f"{r.capacity:,.0f}",
                            r.wall, f"{r.detokenizer:,.0f}", times(r.vs_stock),
                            times(r.vs_router)] for r in rows])


__all__ = ["CORES", "DETOKENIZER", "PLUGIN", "STOCK_ROUTER", "STOCK_X1", "Row", "Target",
           "compare", "detokenizer_capacity", "goal_met", "project", "reserved", "table"]
