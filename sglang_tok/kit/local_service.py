"""The one harness: start the real service, stand in for its scheduler, drive it.

Tests, scripts, `sglang-tok demo` and the example OpenAI server all start the service the
same way (a subprocess of `sglang-tok serve` on a fresh runtime directory, ready once its
`http.port` file exists and `/health` answers 200), barrier the same way (PING/PONG), and
send synthetic steps the same way (`send_steps`). Nothing here is mocked: it is the
installed service, as a deployment runs it.

What the harness knows of the service's shape (how many shards, so how many PONGs a
barrier waits for) it reads from the service's own `/health` once it is up
(`wait_healthy`), never from the flags it meant to pass: a `--shards` among the extra flags
wins in `serve`, and a barrier that waited for fewer PONGs would judge too early.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import psutil

from sglang_tok.kit.scheduler import Scheduler
from sglang_tok.kit.sync_frontend import Frontend, barrier
from sglang_tok.kit.workload import Step


class LocalService:
    """`sglang-tok serve` as a child process, with a `Frontend` on its output (optional).

    With `frontend=False` nothing binds the output endpoint: the caller binds it (e.g.
    with the asyncio `Client`) before or after `start()`; the service's PUSH connects
    either way. With `scheduler=False` nothing connects to the input: the caller sends
    through a socket of its own (`send`, `barrier` and `send_steps` need the scheduler).
    `shards` is the `--shards` flag asked for; once started, `self.shards` is the count
    the service reports on `/health` (extra `args` may hold another `--shards`).
    Without `tmp` it makes a temporary directory of its own, which `stop()` removes (with
    the log in it: read `logs()` before).
    """

    def __init__(self, tmp: Path | None = None, shards: int = 2, args: list[str] | None = None,
                 ring_capacity: int = 1000, tokenizer: str | None = None,
                 frontend: bool = True, env: dict[str, str] | None = None,
                 scheduler: bool = True) -> None:
        self.own_tmp = tmp is None
        self.tmp = Path(tempfile.mkdtemp(prefix="sglang-tok-")) if tmp is None else Path(tmp)
        self.runtime = self.tmp / "rt"
        self.runtime.mkdir(parents=True, exist_ok=True)
        self.shards = shards
        self.log_path = self.tmp / "service.log"
        self.input = f"ipc://{self.runtime}/input.ipc"
        self.output = f"ipc://{self.tmp}/frontend.ipc"
        self.front: Frontend | None = Frontend(self.output) if frontend else None
        self.cmd = [sys.executable, "-m", "sglang_tok.serving.cli", "serve",
                    "--shards", str(shards),
                    "--runtime-dir", str(self.runtime), "--http", "127.0.0.1:0",
                    "--input", self.input, "--output", self.output,
                    "--ring-capacity", str(ring_capacity), "--exit-with-parent",
                    *(["--tokenizer", tokenizer] if tokenizer else []), *(args or [])]
        self.env = {**os.environ, **env} if env else None  # added to the service's environment
        self.scheduler = scheduler
        self.proc: subprocess.Popen[bytes] | None = None
        self.sched: Scheduler | None = None
        self.log: IO[bytes] | None = None

    def __enter__(self) -> LocalService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> LocalService:
        """Start and wait until healthy; on failure, stop what started, then raise."""
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=self.log,
                                     start_new_session=True, env=self.env)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        if self.scheduler:
            self.sched = Scheduler(self.input)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once the HTTP port is published and /health says every process is up;
        take the shard count from that report."""
        assert self.proc is not None
        report = wait_healthy(self.proc, self.runtime, timeout, self.logs)
        self.shards = report_shards(report)

    @property
    def port(self) -> int:
        return int((self.runtime / "http.port").read_text())

    def get(self, path: str) -> tuple[int, str]:
        """(status, body); (0, why) while no HTTP process has published its port."""
        try:
            port = self.port
        except OSError as exc:  # http.port is gone while the HTTP process restarts
            return 0, str(exc)
        return http_get(port, path)

    def health(self) -> tuple[int, dict[str, Any]]:
        return _report(*self.get("/health"))

    def metrics(self) -> dict[str, float]:
        code, body = self.get("/metrics")
        if code != 200:
            raise RuntimeError(f"/metrics answered {code}: {body[:200]}")
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def send(self, frame: bytes) -> None:
        assert self.sched is not None
        self.sched.send(frame)

    def barrier(self, timeout: float = 60.0) -> None:
        """Every delta of every frame sent so far is in `front` (needs the sync Frontend)."""
        assert self.sched is not None and self.front is not None
        if not barrier(self.sched, self.front, self.shards, timeout):
            raise TimeoutError(f"barrier timed out:\n{self.logs()}")

    def send_steps(self, steps: Iterable[Step], interval: float = 0.0,
                   before: Callable[[int], None] | None = None) -> int:
        """Send each step (OPENs, BATCH, ends), reading the output between steps.

        `interval` paces the steps (seconds from one step's start to the next; 0: flat
        out); `before(n)` runs before step n (fault injection). Returns the tokens sent.
        """
        assert self.sched is not None
        return send_steps(self.sched, steps, self.front, interval, before)

    def children(self) -> list[psutil.Process]:
        assert self.proc is not None
        return psutil.Process(self.proc.pid).children()

    def child_pid(self, role_slot: int) -> int:
        """pid of the egress (0) or shard k (k + 1), from the health report."""
        pid: int = self.health()[1]["processes"][role_slot]["pid"]
        return pid

    def kill(self, slot: int) -> int:
        """kill -9 the egress (slot 0) or shard k (slot k + 1); return its pid."""
        victim = self.child_pid(slot)
        os.kill(victim, signal.SIGKILL)
        return victim

    def wait_back(self, slot: int, victim: int, timeout: float = 30.0) -> None:
        """Return once a new process holds the slot and the service is healthy."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.front is not None:
                self.front.poll(0.2)
            else:
                time.sleep(0.2)
            code, h = self.health()
            if code == 200 and h["processes"][slot]["pid"] != victim:
                return
        raise TimeoutError(f"process {slot} did not come back:\n{self.logs()}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, wait for the drain, then kill whatever is left of the process group."""
        if self.sched is not None:
            self.sched.close()
            self.sched = None
        rc = -1
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        elif self.proc is not None:
            rc = self.proc.returncode
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.front is not None:
            self.front.close()
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return rc


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET a path of the service's HTTP process: (status, body); (0, why) when unreachable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def _report(code: int, body: str) -> tuple[int, dict[str, Any]]:
    """/health's answer: (status, report); the report is {} when it is not JSON."""
    try:
        return code, json.loads(body)
    except ValueError:
        return code, {}


def wait_healthy(proc: subprocess.Popen[bytes], runtime: Path, timeout: float = 60.0,
                 logs: Callable[[], str] = lambda: "") -> dict[str, Any]:
    """Wait until `serve` (started with `--runtime-dir runtime --http 127.0.0.1:0`) has
    published its HTTP port and /health answers 200; return that report."""
    deadline = time.monotonic() + timeout
    port_file = runtime / "http.port"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited {proc.returncode}:\n{logs()}")
        try:
            port = int(port_file.read_text())
        except OSError:  # not published yet
            port = 0
        if port:
            code, report = _report(*http_get(port, "/health"))
            if code == 200:
                return report
        time.sleep(0.1)
    raise TimeoutError(f"service not ready in {timeout}s:\n{logs()}")


def report_shards(report: dict[str, Any]) -> int:
    """How many shards the service runs, by its own /health report: the PONGs a barrier
    needs are the egress's and these shards'."""
    shards = report.get("shards")
    if not isinstance(shards, int) or shards < 1:
        raise RuntimeError(f"/health does not say how many shards run: {report}")
    return shards


def send_steps(sched: Scheduler, steps: Iterable[Step], front: Frontend | None = None,
               interval: float = 0.0, before: Callable[[int], None] | None = None) -> int:
    """The scheduler loop of a synthetic workload: one step's frames, then the output."""
    tokens = 0
    t0 = time.monotonic()
    for n, step in enumerate(steps):
        if before is not None:
            before(n)
        if front is not None:
            for rid in step.starts:
                front.register(rid)
        for f in step.opens:
            sched.send(f)
        if step.batch is not None:
            sched.send(step.batch)
            tokens += step.tokens
        for f in step.ends:
            sched.send(f)
        delay = t0 + (n + 1) * interval - time.monotonic() if interval else 0.0
        if front is not None:
            front.poll(max(0.0, delay))
        elif delay > 0:
            time.sleep(delay)
    return tokens
