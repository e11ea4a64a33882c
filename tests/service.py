"""Start the real service as a subprocess and stand in for its scheduler and frontend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from sglang_tok.client import Frontend, Scheduler, barrier


class Service:
    def __init__(self, tmp: Path, shards: int = 2, args: list[str] | None = None,
                 ring_capacity: int = 1000) -> None:
        self.runtime = tmp / "rt"
        self.runtime.mkdir(parents=True, exist_ok=True)
        self.shards = shards
        self.log_path = tmp / "service.log"
        self.input = f"ipc://{self.runtime}/input.ipc"
        self.output = f"ipc://{tmp}/frontend.ipc"
        self.front = Frontend(self.output)
        self.cmd = [sys.executable, "-m", "sglang_tok.cli", "serve", "--shards", str(shards),
                    "--runtime-dir", str(self.runtime), "--http", "127.0.0.1:0",
                    "--input", self.input, "--output", self.output,
                    "--ring-capacity", str(ring_capacity), *(args or [])]
        self.proc: subprocess.Popen[bytes] | None = None
        self.sched: Scheduler | None = None

    def start(self, timeout: float = 60.0) -> Service:
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=self.log,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        port_file = self.runtime / "http.port"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited {self.proc.returncode}:\n{self.logs()}")
            if port_file.exists() and self.health()[0] == 200:
                break
            time.sleep(0.1)
        else:
            raise TimeoutError(f"service not ready in {timeout}s:\n{self.logs()}")
        self.sched = Scheduler(self.input)
        return self

    @property
    def port(self) -> int:
        return int((self.runtime / "http.port").read_text())

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            return 0, str(exc)

    def health(self) -> tuple[int, dict[str, Any]]:
        code, body = self.get("/health")
        try:
            return code, json.loads(body)
        except ValueError:
            return code, {}

    def metrics(self) -> dict[str, float]:
        code, body = self.get("/metrics")
        assert code == 200, body
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
        assert self.sched is not None
        assert barrier(self.sched, self.front, self.shards, timeout), "barrier timed out"

    def children(self) -> list[psutil.Process]:
        assert self.proc is not None
        return psutil.Process(self.proc.pid).children()

    def child_pid(self, role_slot: int) -> int:
        """pid of the egress (0) or shard k (k + 1), from the health report."""
        return self.health()[1]["processes"][role_slot]["pid"]

    def kill(self, slot: int) -> int:
        """kill -9 the egress (slot 0) or shard k (slot k + 1); return its pid."""
        victim = self.child_pid(slot)
        os.kill(victim, signal.SIGKILL)
        return victim

    def wait_back(self, slot: int, victim: int, timeout: float = 30.0) -> None:
        """Return once a new process holds the slot and the service is healthy."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.front.poll(0.2)
            code, h = self.health()
            if code == 200 and h["processes"][slot]["pid"] != victim:
                return
        raise TimeoutError(f"process {slot} did not come back:\n{self.logs()}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self, timeout: float = 20.0) -> int:
        if self.sched is not None:
            self.sched.close()
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
        self._reap_group()
        self.front.close()
        self.log.close()
        return rc

    def _reap_group(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
