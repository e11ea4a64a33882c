"""What every child process does first (die with its parent, dump its stack on SIGABRT, pin,
log), and the shared-memory status block every process writes its heartbeat into.

The status block is written from each process's own hot loop (per message and on poll
timeout), so a wedged loop shows as a stale heartbeat even while the process exists
(gunicorn's WorkerTmp idea, in shared memory), and `/health` reads it without asking anyone.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray
from typing import Generic, TypeVar, overload

import psutil

from .errors import ConfigError

log = logging.getLogger("sglang_tok")

_PR_SET_PDEATHSIG = 1
CONFIG_EXIT = 2  # a child that found a flag's value unusable (ExitCode.CONFIG)

# status block layout, in doubles: service-wide cells, then (beat, pid) per process slot
_ACTIVITY = 0
_EGRESS_READY = 1
_SUPERVISOR_BEAT = 2
_HTTP_PORT = 3
_DRAINING = 4
_FIRST_SLOT = 5
# the egress writes this cell itself, once per frame (no property call on the hot path)
ACTIVITY_CELL = _ACTIVITY
_T = TypeVar("_T", bound=float)  # int and bool too


def _beat_cell(slot: int) -> int:
    return _FIRST_SLOT + 2 * slot


class _Cell(Generic[_T]):
    """A service-wide cell of the status block, read back as its type (a double holds each
    of them exactly): one rule for every named cell, whose readers are other processes."""

    __slots__ = ("index", "read")

    def __init__(self, index: int, read: Callable[[float], _T]) -> None:
        self.index = index
        self.read: Callable[[float], _T] = read

    @overload
    def __get__(self, status: None, owner: type) -> _Cell[_T]: ...

    @overload
    def __get__(self, status: Status, owner: type) -> _T: ...

    def __get__(self, status: Status | None, owner: type) -> _T | _Cell[_T]:
        if status is None:
            return self
        return self.read(status.cells[self.index])

    def __set__(self, status: Status, value: _T) -> None:
        status.cells[self.index] = value


class Status:
    """The status block: one RawArray of doubles in shared memory, named accessors over it.

    Made by the supervisor before anything is spawned and passed to each child as a spawn
    argument (a RawArray pickles only while spawning, which is the one way it travels). No
    locks: each cell has one writer, and a torn read of a heartbeat only delays a verdict
    by one tick.
    """

    __slots__ = ("cells", "slots")

    # frames the egress has drained from the input ring since the service started
    activity = _Cell(_ACTIVITY, int)
    # every shard has said hello to the egress and was started
    egress_ready = _Cell(_EGRESS_READY, bool)
    supervisor_beat = _Cell(_SUPERVISOR_BEAT, float)
    # the port the HTTP process bound (tests ask for port 0); 0 until it has
    http_port = _Cell(_HTTP_PORT, int)
    # the supervisor began its drain: processes without a drain message (the encode
    # service) finish what they hold and exit
    draining = _Cell(_DRAINING, bool)

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.cells = RawArray(ctypes.c_double, _FIRST_SLOT + 2 * slots)

    def beat(self, slot: int) -> float:
        """time.monotonic() of the slot's last heartbeat; 0 until its first."""
        return float(self.cells[_beat_cell(slot)])

    def set_beat(self, slot: int, at: float) -> None:
        self.cells[_beat_cell(slot)] = at

    def pid(self, slot: int) -> int:
        """The pid now running in the slot; 0 while none is."""
        return int(self.cells[_beat_cell(slot) + 1])

    def set_pid(self, slot: int, pid: int) -> None:
        self.cells[_beat_cell(slot) + 1] = pid


class Beat:
    """A process's heartbeat: one store into its slot, cheap enough for every message."""

    __slots__ = ("cells", "index")

    def __init__(self, status: Status, slot: int) -> None:
        self.cells = status.cells
        self.index = _beat_cell(slot)

    def __call__(self) -> None:
        self.cells[self.index] = time.monotonic()


def shards_text(n: int) -> str:
    """"1 shard", "2 shards": for log lines and reports."""
    return f"{n} shard" if n == 1 else f"{n} shards"


def service_roles(shards: int, encode_workers: int = 0) -> list[str]:
    """The service's process slots in status-block order: egress, shards, http, then the
    encode service's broker and workers when it is on."""
    encode = (["encode-broker", *(f"encode-worker {k}" for k in range(encode_workers))]
              if encode_workers else [])
    return ["egress", *(f"shard {k}" for k in range(shards)), "http", *encode]


def encode_slot(shards: int, k: int) -> int:
    """Status slot of the encode broker (k = 0) and of encode worker k - 1 (k >= 1)."""
    return shards + 2 + k


def run_titled(title: str, target: Callable[..., None], args: tuple[object, ...]) -> None:
    """Every child's entry point (kept light to import): `ps`, `top` and py-spy show its
    role as the title, e.g. `sglang-tok: shard 3`."""
    if title:
        import setproctitle
        setproctitle.setproctitle(title)
    try:
        target(*args)
    except ConfigError as exc:  # one line, no traceback; the supervisor stops with code 2
        log.error("%s", exc)
        sys.exit(CONFIG_EXIT)


def freeze_heap() -> None:
    """Move everything alive now (the tokenizer's tables: lists of every id's bytes and
    texts, a few hundred thousand references) out of the garbage collector's reach.

    A process's hot loop allocates and frees containers all the time, so full collections
    come every few seconds; each one walked those tables, 20-45 ms on this machine, the
    p99 of a frame's latency. Startup state lives as long as the process: nothing is lost
    by never scanning it (vLLM and SGLang freeze after start-up for the same reason)."""
    gc.collect()
    gc.freeze()


def setup_child(title: str, level: str, holds_data: bool = True) -> None:
    """Tie the process's life to the parent's, and prefix its logs with its role.

    Shutdown is the supervisor's to run: a ^C or a SIGTERM sent to the whole group (a
    terminal, systemd's control-group kill) must not kill a process that still holds
    accepted frames, so those ignore both and wait for the drain. If the supervisor
    itself dies, the kernel kills its children (PDEATHSIG). A process the supervisor
    finds wedged gets SIGABRT first: faulthandler writes where it was stuck to the log.
    """
    logging.basicConfig(level=level, format=f"%(asctime)s {title} %(levelname)s %(message)s")
    faulthandler.enable()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
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


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity mask), ascending."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> list[int]:
    """Linux's CPU list format ("0-3,8,10-11", as in `taskset -c` and cpuset files):
    the cores, ascending, each once. ValueError says what is wrong."""
    cores: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{part!r} is not a core or a range of cores (e.g. 0-3,8)")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise ValueError(f"the range {part!r} runs backwards")
        cores.update(range(lo, hi + 1))
    return sorted(cores)


def cpu_list_text(cores: list[int]) -> str:
    """The shortest CPU list of `cores` (ranges where they run on): parse_cpu_list's inverse."""
    parts: list[str] = []
    for core in sorted(set(cores)):
        if parts and core == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{core}"
        else:
            parts.append(str(core))
    return ",".join(parts)


def plan_cores(shards: int, want_pin: bool, pool: list[int] | None = None,
               inline: bool = False) -> tuple[list[int | None], int | None, str]:
    """Cores for shards and egress, from `pool` (--cores) or else every usable core: the
    egress on the first, shard k on the next (an inline shard on the egress's); all None
    (with a reason) where there are too few."""
    cores = pool or usable_cores()
    if not want_pin:
        return [None] * shards, None, "pinning disabled (--no-pin)"
    if inline:
        return [None], cores[0], ""
    if len(cores) < shards + 1:
        return [None] * shards, None, (f"{len(cores)} usable cores for {shards_text(shards)} + "
                                       "egress: running unpinned")
    return list(cores[1:shards + 1]), cores[0], ""


def parent_alive(parent_pid: int) -> bool:
    return os.getppid() == parent_pid
