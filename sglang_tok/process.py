"""What every child process does first: name itself, die with its parent, pin, log.

Also the shared-memory status block: one slot per process, written from each process's
own hot loop (per message and on poll timeout), so a wedged loop shows as a stale
heartbeat even while the process exists (gunicorn's WorkerTmp idea, in shared memory).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from typing import Any

import psutil

log = logging.getLogger("sglang_tok")

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15

# status block layout (doubles)
ACTIVITY = 0  # egress: frames drained from the input ring since start
EGRESS_READY = 1  # egress: every shard has said hello and was started
SUPERVISOR_BEAT = 2
DRAINING = 3
HTTP_PORT = 4  # the port the HTTP process bound (tests ask for port 0)
FIRST_SLOT = 5  # then per process p (0 = egress, 1.. = shards, then http): beat, pid
# after http, when the encode service is on: its broker, then its workers


def status_size(shards: int, encode_workers: int = 0) -> int:
    return FIRST_SLOT + 2 * (shards + 2 + (encode_workers + 1 if encode_workers else 0))


def encode_slot(shards: int, k: int) -> int:
    """Status slot of the encode broker (k = 0) and of encode worker k - 1 (k >= 1)."""
    return shards + 2 + k


def beat_index(slot: int) -> int:
    return FIRST_SLOT + 2 * slot


def pid_index(slot: int) -> int:
    return FIRST_SLOT + 2 * slot + 1


def setup_child(title: str, level: str, holds_data: bool = True) -> None:
    """Name the process, tie its life to the parent's, and prefix its logs with its role.

    Shutdown is the supervisor's to run: a ^C or a SIGTERM sent to the whole group (a
    terminal, systemd's control-group kill) must not kill a process that still holds
    accepted frames, so those ignore both and wait for the drain. If the supervisor
    itself dies, the kernel kills its children (PDEATHSIG).
    """
    logging.basicConfig(level=level, format=f"%(asctime)s {title} %(levelname)s %(message)s")
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, title.encode()[:15], 0, 0, 0)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:  # pragma: no cover - not Linux
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if holds_data:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def pin(core: int | None, title: str) -> None:
    """Pin to one core when the supervisor found enough of them; log where we landed."""
    proc = psutil.Process()
    if core is None:
        log.info("%s running unpinned on cores %s", title, proc.cpu_affinity())
        return
    try:
        proc.cpu_affinity([core])
        log.info("%s pinned to core %d", title, core)
    except (OSError, psutil.Error, ValueError) as exc:
        log.warning("%s could not pin to core %d (%s); running unpinned", title, core, exc)


def plan_cores(shards: int, want_pin: bool) -> tuple[list[int | None], int | None, str]:
    """Cores for shards and egress; all None (with a reason) where there are too few."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = list(range(os.cpu_count() or 1))
    if not want_pin:
        return [None] * shards, None, "pinning disabled (--no-pin)"
    if len(cores) < shards + 1:
        return [None] * shards, None, (f"{len(cores)} usable cores for {shards} shards + egress:"
                                       " running unpinned")
    return list(cores[1:shards + 1]), cores[0], ""


class Beat:
    """A process's heartbeat slot in the status block."""

    __slots__ = ("status", "index")

    def __init__(self, status: Any, slot: int) -> None:
        self.status = status
        self.index = beat_index(slot)

    def __call__(self) -> None:
        self.status[self.index] = time.monotonic()


def parent_alive(parent_pid: int) -> bool:
    return os.getppid() == parent_pid
