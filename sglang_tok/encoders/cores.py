"""Where encode processes run: on cores the egress and shards do not use, when there are any.

The shards' cores are theirs alone (process.plan_cores). Encode workers get one free core
each when there are enough; otherwise they share the free cores; with none free they run
unpinned. Either way the service starts, and says what it did.
"""

from __future__ import annotations

import logging

import psutil

log = logging.getLogger("sglang_tok.encode")


def plan(shards: int, workers: int, want_pin: bool, pool: list[int] | None = None
         ) -> tuple[list[list[int] | None], str]:
    """Per worker, the cores to pin it to (None = unpinned), and a warning, if any; from
    `pool` (--cores) or else every usable core."""
    cores = pool or sorted(psutil.Process().cpu_affinity())
    if not want_pin:
        return [None] * workers, ""
    if len(cores) < shards + 1:  # the shards run unpinned: no core is theirs alone
        return [None] * workers, (f"{len(cores)} usable cores for {shards} shards + egress: "
                                  f"{workers} encode workers run unpinned")
    free = cores[shards + 1:]
    if len(free) >= workers:
        return [[c] for c in free[:workers]], ""
    if free:
        return [list(free)] * workers, (f"{len(free)} cores left after {shards} shards + "
                                        f"egress for {workers} encode workers: they share "
                                        f"cores {free}")
    return [None] * workers, (f"no core left after {shards} shards + egress for {workers} "
                              "encode workers: they run unpinned, beside the shards")


def pin_to(cores: list[int] | None, title: str) -> None:
    proc = psutil.Process()
    if cores is None:
        log.info("%s running unpinned on cores %s", title, proc.cpu_affinity())
        return
    try:
        proc.cpu_affinity(cores)
        log.info("%s pinned to cores %s", title, cores)
    except (OSError, psutil.Error, ValueError) as exc:
        log.warning("%s could not pin to cores %s (%s); running unpinned", title, cores, exc)
