"""The processes of a benchmark: a work folder that goes with the process, a process tree's
pids and CPU seconds, waiting for a ready file, and stopping."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil


def _folder_of(package: str) -> str:
    """The folder a package is imported from (a checkout's root, standin/, dev/, or
    site-packages)."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None, package
    return str(Path(spec.origin).resolve().parents[1])


# the folders of the service and of the packages beside it (the stand-in, the test kit,
# the benchmarks): another python runs this checkout's code with them first on its path
PACKAGE_FOLDERS = list(dict.fromkeys(_folder_of(p) for p in (
    "sglang_tok", "sglang_tok_standin", "sglang_tok_testkit", "sglang_tok_bench")))


def workdir(prefix: str) -> Path:
    """A fresh folder, removed when the process exits whichever way it ends."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def package_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the folders of this checkout's packages first
    on PYTHONPATH: another python (SGLang's environment) running one of these modules with
    `-m` runs this checkout's code, whatever sglang_tok it has installed."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*PACKAGE_FOLDERS,
                                                      env.get("PYTHONPATH")]))
    return env


def tree_pids(*roots: int) -> list[int]:
    """These processes and all their descendants (those still alive)."""
    out = []
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            out += [pid] + [c.pid for c in proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


def cpu_seconds(pids: Iterable[int], per: dict[str, list[float]] | None = None) -> float:
    """User + system CPU seconds of these processes; `per` collects each one's, by its
    title."""
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            t = proc.cpu_times()
            total += t.user + t.system
            if per is not None:
                title = " ".join(proc.cmdline()[:1]) or str(pid)
                per.setdefault(title, []).append(t.user + t.system)
        except psutil.NoSuchProcess:
            pass
    return total


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """Until `proc` creates `path`; kills it and raises if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{what} failed to start")
        time.sleep(0.05)


def stop_group(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """A whole server started in its own session: SIGTERM to its process group, then, after
    `timeout` seconds or once its leader is gone, SIGKILL to whatever of the group is left
    (SGLang's children outlive a launcher that exits first)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def terminate(proc: subprocess.Popen[bytes], timeout: float = 30, group: bool = False) -> None:
    """SIGTERM, then SIGKILL (to its process group with `group`) if it has not exited in
    `timeout` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()
