"""The arbiter: supervise the child processes it is given, and keep them alive.

`Supervisor` knows nothing of the service (sglang_tok/serving/service.py says which
children it has): it runs the `Child` specs it is given. Its loop reads in one breath (wait
on children and signals, reap what exited, kill what is stuck, start what is due); signal
handlers only enqueue; every deadline is on time.monotonic(). A child's clock starts at
spawn: one that sends no heartbeat within the boot timeout, or whose heartbeat goes stale,
gets SIGABRT (faulthandler writes its stack to the log), then SIGKILL. A dead child comes
back by its `Restart` policy (backoff, a cap per window); shutdown is staged against one
deadline (drain the data holders, then SIGTERM, then SIGKILL). Shapes follow gunicorn's
arbiter and uvicorn's multiprocess supervisor.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from sglang_tok.process import CONFIG_EXIT, Status, run_titled

log = logging.getLogger("sglang_tok.supervisor")
TICK_S = 0.2


class ExitCode(IntEnum):
    """What `sglang-tok serve` exits with (also listed in `serve --help`)."""

    OK = 0  # stopped by SIGTERM or SIGINT after the drain
    RESTART_LIMIT = 1  # a process died more than --restart-limit times in --restart-window
    CONFIG = 2  # a flag's value, or the tokenizer, is unusable: nothing was started
    BOOT_FAILURE = 3  # a process exited, or sent no heartbeat within --boot-timeout, on boot
    FORCED = 130  # a second SIGINT: exit at once, the children die with the supervisor


@dataclass(frozen=True)
class Restart:
    """When a dead child comes back: after a delay doubling from `first` up to `cap`, and
    at most `limit` times within `window` seconds; the next death stops the service."""

    limit: int = 5
    window: float = 60.0
    first: float = 0.1
    cap: float = 5.0

    def delay(self, recent: int) -> float:
        return min(self.cap, self.first * 2 ** (recent - 1))


@dataclass(frozen=True)
class Child:
    """One supervised role, as data: the supervisor tests no role names."""

    role: str  # "shard 3": logs, the process title, the restart metric's label
    slot: int  # its (beat, pid) slot in the status block
    target: Callable[..., None]  # module-level, so that `spawn` can import it
    args: tuple[object, ...]
    # True: it holds accepted data, ignores SIGTERM and exits once drained (killed at the
    # drain deadline). False: SIGTERM once the data holders are done.
    holds_data: bool
    restart: Restart = Restart()
    args_on_restart: tuple[object, ...] | None = None  # if a restart must start differently
    on_death: Callable[[int], None] | None = None  # given the dead pid, before any restart


@dataclass(frozen=True)
class Timeouts:
    heartbeat: float = 5.0  # a beat older than this: the child is stuck
    boot: float = 30.0  # spawn to first beat
    drain: float = 5.0  # the drain signal to the data holders' exit
    abort_grace: float = 1.0  # SIGABRT (stack dump) to SIGKILL
    stop_grace: float = 2.0  # SIGTERM to SIGKILL, at shutdown


class Stop(Exception):
    """The service cannot go on; carries the exit code."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Running:
    """A child's life so far: its process, its clocks, its recent restarts."""

    def __init__(self, spec: Child) -> None:
        self.spec = spec
        self.proc: BaseProcess | None = None
        self.starts = 0
        self.spawned_at = 0.0
        self.start_at = 0.0  # when a pending restart is due
        self.aborted_at = 0.0  # when it got SIGABRT; SIGKILL after the grace
        self.verdict = ""  # why the supervisor killed it, for the reap's message
        self.restarts: collections.deque[float] = collections.deque()


def _nothing(*_: object) -> None:
    pass


class Supervisor:
    def __init__(self, children: list[Child], status: Status, timeouts: Timeouts, *,
                 drain: Callable[[float], None] = _nothing,
                 tick: Callable[[], None] = _nothing,
                 on_restart: Callable[[Child], None] = _nothing,
                 title: str = "", parent: int | None = None,
                 on_forced_exit: Callable[[], None] = _nothing) -> None:
        """`drain(deadline)` tells the data holders to finish by that monotonic time;
        `tick()` runs once per loop turn; `title` prefixes the children's process titles;
        with `parent` (a pid), its exit stops the service as SIGTERM would;
        `on_forced_exit()` runs before a second SIGINT ends the process at once."""
        self.parent = parent
        self.on_forced_exit = on_forced_exit
        self.running = [_Running(c) for c in children]
        self.status = status
        self.timeouts = timeouts
        self.drain = drain
        self.tick = tick
        self.on_restart = on_restart
        self.title = title
        self.ctx = mp.get_context("spawn")
        self.signals: collections.deque[int] = collections.deque()

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.signals and signum == signal.SIGINT:
            self.on_forced_exit()  # os._exit runs no `finally`
            os._exit(ExitCode.FORCED)  # a second ^C; the children die with us (PDEATHSIG)
        self.signals.append(signum)

    # ------------------------------------------------------------------ loop
    def run(self) -> int:
        """Supervise until a signal or a fatal fault, then drain; return the exit code."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        old_handlers = {s: signal.signal(s, self._on_signal)
                        for s in (signal.SIGTERM, signal.SIGINT)}
        old_wakeup = signal.set_wakeup_fd(wake_w)  # a signal ends the tick's wait at once
        try:
            code = self._supervise(wake_r)
        finally:
            self._shutdown()
            signal.set_wakeup_fd(old_wakeup)
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            os.close(wake_r)
            os.close(wake_w)
        return code

    def _supervise(self, wake_fd: int) -> ExitCode:
        try:
            for run in self.running:
                self._spawn(run)
            log.info("started %s", ", ".join(f"{r.spec.role} (pid {self.status.pid(r.spec.slot)})"
                                             for r in self.running))
            while not self.signals:
                self.status.supervisor_beat = time.monotonic()
                self._sleep(wake_fd)
                self._reap()
                self._kill_stuck()
                self._start_due()
                self.tick()
                if self.parent is not None and os.getppid() != self.parent:
                    log.warning("the process that started the service exited; stopping")
                    self.signals.append(signal.SIGTERM)
        except Stop as stop:
            log.error("%s Stopping.", stop)
            return stop.code
        log.info("%s received", signal.Signals(self.signals[0]).name)
        return ExitCode.OK

    def _sleep(self, wake_fd: int) -> None:
        sentinels = [r.proc.sentinel for r in self.running if r.proc is not None]
        if wait([*sentinels, wake_fd], TICK_S):
            try:
                os.read(wake_fd, 512)
            except BlockingIOError:
                pass

    def _spawn(self, run: _Running) -> int:
        spec = run.spec
        args = spec.args
        if run.starts and spec.args_on_restart is not None:
            args = spec.args_on_restart
        title = f"{self.title}: {spec.role}" if self.title else ""
        self.status.set_beat(spec.slot, 0.0)
        run.spawned_at = time.monotonic()  # the boot clock starts here, as gunicorn's does
        run.aborted_at, run.verdict = 0.0, ""
        proc = run.proc = self.ctx.Process(target=run_titled, args=(title, spec.target, args),
                                           name=spec.role, daemon=False)
        proc.start()
        assert proc.pid is not None
        self.status.set_pid(spec.slot, proc.pid)
        run.starts += 1
        return proc.pid

    def _reap(self) -> None:
        for run in self.running:
            proc, spec = run.proc, run.spec
            if proc is None or proc.is_alive():
                continue
            proc.join()
            pid = proc.pid or 0
            booted = self.status.beat(spec.slot) > 0
            run.proc = None
            self.status.set_pid(spec.slot, 0)
            log.warning("%s (pid %d) exited with code %s%s", spec.role, pid, proc.exitcode,
                        f" ({run.verdict})" if run.verdict else "")
            if spec.on_death is not None:
                spec.on_death(pid)
            if not booted and run.starts == 1:
                if proc.exitcode == CONFIG_EXIT:
                    raise Stop(ExitCode.CONFIG, f"{spec.role} refused a flag's value (the "
                               "error above).")
                raise Stop(ExitCode.BOOT_FAILURE,
                           f"{spec.role} failed at boot ({run.verdict or 'it exited'}); "
                           "see its log above.")
            self._schedule_restart(run)

    def _schedule_restart(self, run: _Running) -> None:
        policy, now = run.spec.restart, time.monotonic()
        while run.restarts and now - run.restarts[0] > policy.window:
            run.restarts.popleft()
        if len(run.restarts) >= policy.limit:
            raise Stop(ExitCode.RESTART_LIMIT,
                       f"{run.spec.role} died again after {len(run.restarts)} restarts within "
                       f"{policy.window:g}s (--restart-limit {policy.limit}, "
                       f"--restart-window {policy.window:g}).")
        run.restarts.append(now)
        run.start_at = now + policy.delay(len(run.restarts))

    def _kill_stuck(self) -> None:
        """SIGABRT a child that is alive but stuck (faulthandler dumps its stack), then
        SIGKILL it if it is still there after the grace; the reap restarts it."""
        now = time.monotonic()
        for run in self.running:
            if run.proc is None or run.proc.pid is None:
                continue
            if run.aborted_at:
                if now - run.aborted_at > self.timeouts.abort_grace:
                    run.proc.kill()
                continue
            why = self._stuck(run, now)
            if why:
                log.error("%s (pid %d) %s: SIGABRT (its stack goes to the log), then SIGKILL",
                          run.spec.role, run.proc.pid, why)
                run.verdict, run.aborted_at = why, now
                os.kill(run.proc.pid, signal.SIGABRT)

    def _stuck(self, run: _Running, now: float) -> str:
        beat = self.status.beat(run.spec.slot)
        if beat == 0:
            if now - run.spawned_at > self.timeouts.boot:
                return f"sent no heartbeat within {self.timeouts.boot:g}s of its spawn"
            return ""
        if now - beat > self.timeouts.heartbeat:
            return f"missed heartbeats for {now - beat:.1f}s"
        return ""

    def _start_due(self) -> None:
        now = time.monotonic()
        for run in self.running:
            if run.proc is None and now >= run.start_at:
                pid = self._spawn(run)
                log.info("restarted %s as pid %d", run.spec.role, pid)
                self.on_restart(run.spec)

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> None:
        """One deadline for the whole drain: the data holders get it, and are killed at it;
        then the others get SIGTERM, and SIGKILL after a grace."""
        deadline = time.monotonic() + self.timeouts.drain
        log.info("draining (deadline %.1fs)", self.timeouts.drain)
        self.drain(deadline)
        for run in self.running:
            if run.proc is not None and run.spec.holds_data:
                run.proc.join(max(0.0, deadline - time.monotonic()))
        for run in self.running:
            if run.proc is None or not run.proc.is_alive():
                continue
            if run.spec.holds_data:
                log.warning("%s did not drain in time: killing it", run.spec.role)
                run.proc.kill()  # it ignores SIGTERM, which belongs to the drain
            else:
                run.proc.terminate()
        grace = time.monotonic() + self.timeouts.stop_grace
        for run in self.running:
            if run.proc is not None:
                run.proc.join(max(0.0, grace - time.monotonic()))
                if run.proc.is_alive():
                    run.proc.kill()
                    run.proc.join()
        log.info("stopped")
