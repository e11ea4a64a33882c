"""`sglang-tok serve`: start the egress, the shards and the HTTP process; keep them alive.

The loop reads in one breath: wait on children and signals, reap what exited, kill what
stopped beating, start what is missing, report ready once. Signal handlers only enqueue.
Restart policy lives in `Child.may_restart`: backoff, and a cap per window; a child that
dies before its loop ever ticked on its first start stops the service (a bad tokenizer
path must not become a restart loop).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import zmq

from .config import Config, finalize
from .process import (
    DRAINING,
    EGRESS_READY,
    HTTP_PORT,
    SUPERVISOR_BEAT,
    beat_index,
    pid_index,
    plan_cores,
    status_size,
)
from .ring import link
from .ring.sockets import make_socket
from .tokenizer import TokenizerLoadError, load_tokenizer

log = logging.getLogger("sglang_tok.supervisor")
TICK_S = 0.2


class BootFailure(Exception):
    pass


class Child:
    """One supervised process: how to start it, and its restart history."""

    def __init__(self, role: str, slot: int, target: Callable[..., None],
                 args: Callable[[], tuple[Any, ...]]) -> None:
        self.role = role
        self.slot = slot
        self.target = target
        self.args = args
        self.proc: Any = None
        self.starts = 0
        self.restarts: deque[float] = deque()
        self.start_at = 0.0  # when a pending restart may happen

    def start(self, ctx: Any, status: Any) -> int:
        status[beat_index(self.slot)] = 0.0
        proc = self.proc = ctx.Process(target=self.target, args=self.args(), name=self.role,
                                       daemon=False)
        proc.start()
        status[pid_index(self.slot)] = float(proc.pid)
        self.starts += 1
        return int(proc.pid)

    def may_restart(self, limit: int, window: float) -> bool:
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > window:
            self.restarts.popleft()
        if len(self.restarts) >= limit:
            return False
        self.restarts.append(now)
        self.start_at = now + min(5.0, 0.1 * 2 ** (len(self.restarts) - 1))
        return True


class Supervisor:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.ctx = mp.get_context("spawn")
        self.status = self.ctx.RawArray("d", status_size(cfg.shards))
        self.signals: deque[int] = deque()
        self.ready_reported = False
        self.http_port = 0
        self.exit_code = 0
        self.parent_pid = os.getpid()
        shard_cores, egress_core, why = plan_cores(cfg.shards, cfg.pin)
        if why:
            log.warning(why)
        from .egress.main import main as egress_main
        from .http import main as http_main
        from .metrics import Metrics
        from .shards.main import main as shard_main
        self.metrics = Metrics()
        st, pp = self.status, self.parent_pid
        egress = Child("egress", 0, egress_main, lambda: (cfg, st, egress_core, egress.starts > 0))
        self.children = [egress]
        for k in range(cfg.shards):
            self.children.append(Child(
                f"shard {k}", 1 + k, shard_main,
                lambda k=k: (cfg, st, k, shard_cores[k], pp)))  # type: ignore[misc]
        self.children.append(Child("http", cfg.shards + 1, http_main, lambda: (cfg, st, pp)))
        self.zctx = zmq.Context(io_threads=1)
        self.notices = make_socket(self.zctx, zmq.PUSH, cfg.ipc("egress-ctl.ipc"), bind=False,
                                   hwm=1000, linger_ms=1000)

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.signals and signum == signal.SIGINT:
            os._exit(130)  # a second ^C: force exit, children die with us (PDEATHSIG)
        self.signals.append(signum)

    # ------------------------------------------------------------------ loop
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for child in self.children:
            child.start(self.ctx, self.status)
        log.info("started %d shards, egress and http; input %s, output %s", self.cfg.shards,
                 self.cfg.input, self.cfg.output)
        try:
            while not self.signals:
                self.status[SUPERVISOR_BEAT] = time.monotonic()
                wait([c.proc.sentinel for c in self.children if c.proc is not None], TICK_S)
                self.reap()
                self.check_heartbeats()
                self.start_missing()
                self.report_ready()
        except BootFailure as exc:
            log.error("%s", exc)
            self.exit_code = 1
        self.shutdown()
        return self.exit_code

    def reap(self) -> None:
        for child in self.children:
            proc = child.proc
            if proc is None or proc.is_alive():
                continue
            proc.join()
            ever_ticked = self.status[beat_index(child.slot)] > 0
            self.status[pid_index(child.slot)] = 0.0
            child.proc = None
            _mark_dead(proc.pid)
            log.warning("%s (pid %d) exited with code %s", child.role, proc.pid, proc.exitcode)
            if child.role.startswith("shard"):
                note = link.ShardDown(child.slot - 1, proc.pid)
                self.notices.send(link.notice_encoder.encode(note))
            if child.starts == 1 and not ever_ticked:
                raise BootFailure(f"{child.role} failed at boot (exit code {proc.exitcode}); "
                                  "see its log above. Stopping.")
            if not child.may_restart(self.cfg.restart_limit, self.cfg.restart_window):
                raise BootFailure(f"{child.role} died {self.cfg.restart_limit} times within "
                                  f"{self.cfg.restart_window:.0f}s. Stopping.")
            self._count_restart(child.role)

    def check_heartbeats(self) -> None:
        """A process that exists but whose loop stopped ticking is killed, then restarted."""
        now = time.monotonic()
        for child in self.children:
            beat = self.status[beat_index(child.slot)]
            if child.proc is not None and beat > 0 and now - beat > self.cfg.heartbeat_timeout:
                log.error("%s (pid %d) missed heartbeats for %.1fs: killing it", child.role,
                          child.proc.pid, now - beat)
                child.proc.kill()

    def start_missing(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.proc is None and now >= child.start_at:
                pid = child.start(self.ctx, self.status)
                log.info("restarted %s as pid %d", child.role, pid)

    def report_ready(self) -> None:
        port = int(self.status[HTTP_PORT])
        if self.ready_reported and port != self.http_port:  # a restarted HTTP process
            self.http_port = port
            self._write_port(port)
            log.info("http now listening on %s:%d", self.cfg.http_host, port)
        if self.ready_reported or self.status[EGRESS_READY] != 1.0:
            return
        if not all(self.status[beat_index(c.slot)] > 0 for c in self.children):
            return
        if self.status[HTTP_PORT] == 0:
            return
        self.ready_reported = True
        self.http_port = port
        self._write_port(port)
        log.info("ready: %d shards; input %s; output %s; http %s:%d", self.cfg.shards,
                 self.cfg.input, self.cfg.output, self.cfg.http_host, port)

    def _write_port(self, port: int) -> None:
        """Atomically: a reader never sees a half-written file."""
        tmp = Path(self.cfg.runtime_dir, "http.port.tmp")
        tmp.write_text(str(port))
        tmp.replace(Path(self.cfg.runtime_dir, "http.port"))

    def _count_restart(self, role: str) -> None:
        self.metrics.restarts.labels(role.split()[0]).inc()

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Stop intake, let accepted frames' deltas out, then terminate, then kill."""
        self.status[DRAINING] = 1.0
        deadline = time.monotonic() + self.cfg.drain_timeout
        log.info("draining (deadline %.1fs)", self.cfg.drain_timeout)
        self.notices.send(link.notice_encoder.encode(link.Drain(deadline)))
        workers = [c for c in self.children if c.proc is not None and c.role != "http"]
        for child in workers:
            child.proc.join(max(0.0, deadline - time.monotonic()))
        for child in self.children:
            if child.proc is not None and child.proc.is_alive():
                if child.role != "http":
                    log.warning("%s did not drain in time: killing it", child.role)
                    child.proc.kill()  # it ignores SIGTERM, which belongs to the drain
                else:
                    child.proc.terminate()
        for child in self.children:
            if child.proc is not None:
                child.proc.join(2.0)
                if child.proc.is_alive():
                    child.proc.kill()
                    child.proc.join()
        self.notices.close(linger=0)
        self.zctx.term()
        self._clean_runtime_dir()
        log.info("stopped")

    def _clean_runtime_dir(self) -> None:
        """Leave no socket files, metric files or port file behind."""
        rt = Path(self.cfg.runtime_dir)
        for path in [*rt.glob("*.ipc"), rt / "http.port"]:
            path.unlink(missing_ok=True)
        shutil.rmtree(rt / "metrics", ignore_errors=True)
        try:
            rt.rmdir()  # only if nothing else lives there
        except OSError:
            pass


def _mark_dead(pid: int) -> None:
    from prometheus_client import multiprocess
    multiprocess.mark_process_dead(pid)


def serve(cfg: Config) -> int:
    logging.basicConfig(level=cfg.log_level,
                        format="%(asctime)s sglang-tok supervisor %(levelname)s %(message)s",
                        stream=sys.stderr)
    cfg = finalize(cfg)
    try:
        load_tokenizer(cfg.tokenizer)  # fail fast and clearly, before any child starts
    except TokenizerLoadError as exc:
        log.error("%s", exc)
        return 2
    metrics_dir = Path(cfg.runtime_dir, "metrics")
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(mode=0o700)
    # prometheus-client picks its multiprocess mode from this at import; children inherit it
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    return Supervisor(cfg).run()
