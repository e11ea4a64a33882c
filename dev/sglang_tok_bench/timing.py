"""Timers for benchmarks on a shared machine: the best of several runs, and cases run in
interleaved rounds so that every case sees the same machine."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

Clock = Callable[[], float]
K = TypeVar("K")


def best(fn: Callable[[], object], repeat: int, setup: Callable[[], object] | None = None,
         clock: Clock = time.thread_time) -> float:
    """The least time of `repeat` runs of `fn` (CPU time of this thread by default: the
    machine is shared), each after `setup` and a garbage collection, neither timed."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        gc.collect()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def interleaved(cases: Mapping[K, Callable[[], float]], rounds: int) -> dict[K, list[float]]:
    """Each round runs every case once, in order, so that every case sees the same machine;
    a case returns its own figure (a time, a rate). Per case, its figures in round order."""
    out: dict[K, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            out[name].append(case())
    return out


def timed(fn: Callable[[], object], clock: Clock = time.perf_counter) -> Callable[[], float]:
    """`fn` as a case of `interleaved`: it returns the seconds one run took."""
    def case() -> float:
        t0 = clock()
        fn()
        return clock() - t0
    return case
