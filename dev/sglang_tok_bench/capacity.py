"""The capacity model of the SGLang end-to-end benchmark: what a measured server would stream on
a machine of C cores.

A server is stages of processes (the HTTP server and TokenizerManager, its workers, the
detokenizer's processes); each stage's CPU seconds per id is measured. A process is one
core at most, so a stage of n processes streams at most n / (its CPU per id) ids/s; the
machine streams at most (C - reserved) / (the sum of every stage's CPU per id), the
reserved cores being the scheduler's (the stand-in stands for a GPU's scheduler, whose
core is not the detokenizer's to use). The system's capacity is the least of these, and
the stage that sets it is its wall.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CORES = "cores"  # the wall when the machine's cores, not one stage, set the capacity


@dataclass(frozen=True)
class Stage:
    processes: int
    cpu_per_id: float  # CPU seconds per streamed id, all of the stage's processes together

    @property
    def capacity(self) -> float:
        return self.processes / self.cpu_per_id if self.cpu_per_id > 0 else float("inf")


def capacity(stages: Mapping[str, Stage], cores: int, reserved: int = 1) -> tuple[float, str]:
    """(ids/s, the wall) on `cores` cores."""
    total = sum(s.cpu_per_id for s in stages.values())
    best, wall = (max(cores - reserved, 1) / total if total > 0 else float("inf")), CORES
    for name, stage in stages.items():
        if stage.capacity < best:
            best, wall = stage.capacity, name
    return best, wall


def scaled(stages: Mapping[str, Stage], counts: Mapping[str, int]) -> dict[str, Stage]:
    """The same per-id costs with other process counts (8 tokenizer workers where 4 were
    measured): a stage's CPU per id is its work per id, whatever the processes sharing it."""
    return {name: Stage(counts.get(name, s.processes), s.cpu_per_id)
            for name, s in stages.items()}
