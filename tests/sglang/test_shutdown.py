"""The service inside SGLang leaves nothing behind at a stop (issue 36): no process, and no
runtime directory, whatever ends it and in whatever order.

Without SGLang, `launcher_host.py` starts the service through the plugin's launcher and
ends as SGLang's launcher process does (its SIGTERM and SIGINT paths SIGKILL every
descendant, then exit); the test also SIGKILLs the processes itself in every order
SGLang's shutdown and crashes produce. With SGLang (`SGLANG_PYTHON`), `sglang_server.py`
runs `python -m sglang.launch_server` with the plugin (the scheduler stood in for: no
model loads on CPU here) and stops it as a user does: SIGTERM, SIGINT to the launcher,
Ctrl-C to its process group, and a scheduler crash (SGLang then SIGKILLs its whole tree,
itself included). The same launches count the shard processes (issue 37).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest
from fake_scheduler import CRASH
from sglang_cases import sglang_python

from sglang_tok.integrations.sglang import cores
from sglang_tok_testkit.sglang_side import model_dir

HERE = Path(__file__).resolve().parent


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path: the service's ipc paths live under it."""
    path = Path(tempfile.mkdtemp(prefix="sgt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("sglang-tok-*"))


def processes_naming(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions `text` (a test's own directory)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid != os.getpid() and text in " ".join(proc.info["cmdline"] or ()):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except psutil.Error:
            pass
    return found


def settled(tree: list[psutil.Process], tmp: Path, timeout: float = 15.0) -> tuple[
        list[str], list[str]]:
    """(dirs left, processes left) once both are empty or `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [f"{p.pid} {p.info.get('cmdline') if hasattr(p, 'info') else ''}"
                 for p in tree if _running(p)]
        alive += [f"{p.pid} {p.info['cmdline']}" for p in processes_naming(str(tmp))
                  if all(p.pid != q.pid for q in tree)]
        dirs = leftovers(tmp)
        if (not alive and not dirs) or time.monotonic() > deadline:
            return dirs, alive
        time.sleep(0.1)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ------------------------------------------------------------------ without SGLang
def _kill(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


STOPS = ["sigterm", "sigint", "host-killed", "tree-killed", "host-then-tree", "serve-killed"]


@pytest.mark.parametrize("stop", STOPS)
def test_the_launcher_leaves_nothing_whatever_ends_it(short_tmp: Path, stop: str) -> None:
    """sigterm/sigint: SGLang's shutdown (descendants SIGKILLed, then the launcher exits);
    host-killed: the launcher dies first; tree-killed: SGLang's crash path (descendants,
    then the launcher, SIGKILLed); host-then-tree: the reverse order; serve-killed: only
    the service is SIGKILLed, and the launcher goes on."""
    env = {**os.environ, "TMPDIR": str(short_tmp)}
    host = subprocess.Popen([sys.executable, str(HERE / "launcher_host.py"), str(short_tmp)],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert host.stdout is not None
        started = json.loads(host.stdout.readline())
        assert started["up"], started
        assert Path(started["runtime"]).parent == short_tmp
        me = psutil.Process(host.pid)
        serve = psutil.Process(started["pid"])
        tree = [me, *me.children(recursive=True)]
        assert len(tree) >= 5, tree  # the launcher, serve, egress, a shard, http
        if stop == "sigterm":
            host.send_signal(signal.SIGTERM)
        elif stop == "sigint":
            host.send_signal(signal.SIGINT)
        elif stop == "host-killed":
            me.kill()
        elif stop == "tree-killed":
            _kill(tree[1:] + [me])
        elif stop == "host-then-tree":
            _kill([me, *tree[1:]])
        elif stop == "serve-killed":
            serve.kill()
            assert not settled([serve], short_tmp, 15)[0]  # the launcher is still there
            host.send_signal(signal.SIGTERM)
        code = host.wait(30)
        dirs, alive = settled(tree, short_tmp)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert code == {"sigterm": 0, "sigint": -signal.SIGINT}.get(stop, code)
    assert dirs == [] and alive == []


# ------------------------------------------------------------------ with SGLang
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(server: subprocess.Popen[bytes], log: Path, tmp: Path, timeout: float) -> Path:
    """The service's runtime directory once SGLang says it is up and the service is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-4000:]
        ready = [p for p in tmp.glob("sglang-tok-*") if (p / "http.port").exists()]
        if ready and "fired up" in log.read_text(errors="replace"):
            return ready[0]
        time.sleep(0.5)
    pytest.fail("SGLang did not come up:\n" + log.read_text()[-4000:])


class Launched(NamedTuple):
    server: subprocess.Popen[bytes]
    runtime: Path  # the service's runtime directory
    tree: list[psutil.Process]  # the launcher and every process under it, once up
    serve: psutil.Process  # the service's supervisor


@contextmanager
def launched(args: list[str], env: dict[str, str], log: Path, tmp: Path) -> Iterator[Launched]:
    """SGLang's launcher up with the plugin's service ready; SIGKILLed whole at the end
    if the test left it running."""
    with log.open("wb") as out:
        server = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    try:
        runtime = _wait_up(server, log, tmp, 240)
        launcher = psutil.Process(server.pid)
        tree = [launcher, *launcher.children(recursive=True)]
        serve = next(p for p in tree if "sglang-tok: supervisor" in " ".join(p.cmdline()))
        yield Launched(server, runtime, tree, serve)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _post(port: int, path: str, body: dict[str, object]) -> None:
    """A request whose answer does not matter (the server may die answering it)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=30).read()
    except (urllib.error.URLError, OSError):
        pass


def _placement(serve: psutil.Process) -> dict[str, list[int]]:
    """The cores each of the service's processes may run on, by role."""
    roles = {" ".join(c.cmdline()).strip(): c for c in serve.children()}
    return {title.split(": ", 1)[1]: sorted(proc.cpu_affinity())
            for title, proc in roles.items() if title.startswith("sglang-tok: ")}


def _check_placement(placed: dict[str, list[int]], workers: int, pin: str | None,
                     port: int, mask: list[int]) -> None:
    """As many shards as asked; unpinned (the launcher's mask) unless SGLANG_TOK_PIN asks,
    and then the egress and each shard on the cores of the plan."""
    # one worker: its shard inside the egress's process (--inline-shard)
    shards = workers if workers > 1 else 0
    assert sorted(r for r in placed if r.startswith("shard")) == [
        f"shard {k}" for k in range(shards)]
    plan = cores.choose(cores.pin_setting(pin), workers, port, mask)[0]
    if plan is None:
        assert all(got == mask for got in placed.values()), placed
    else:
        assert placed["egress"] == plan[:1], placed
        assert [placed[f"shard {k}"] for k in range(shards)] == [[c] for c in plan[1:]]


@pytest.mark.parametrize(("stop", "workers", "pin"), [
    ("sigterm", 1, None), ("sigint", 2, None), ("ctrl-c", 1, "1"), ("crash", 2, "1")])
def test_sglang_with_the_plugin_leaves_nothing_at_a_stop(
        short_tmp: Path, stop: str, workers: int, pin: str | None) -> None:
    """Also the service's shape in a real launch (issue 37): `--detokenizer-worker-num`
    shards (SGLang's default: one), unpinned unless SGLANG_TOK_PIN asks."""
    python = sglang_python()
    if python is None:
        pytest.skip("SGLANG_PYTHON names no python importing SGLang 0.5.23 and sglang_tok")
    env = {**os.environ, "SGLANG_PLUGINS": "sglang_tok", "TMPDIR": str(short_tmp)}
    env.pop(cores.SETTING, None)
    env.pop("SGLANG_SET_CPU_AFFINITY", None)
    if pin is not None:
        env[cores.SETTING] = pin
    log = short_tmp / "server.log"
    port = _free_port()
    args = [python, str(HERE / "sglang_server.py"), "--model-path", str(model_dir(short_tmp)),
            "--device", "cpu", "--port", str(port),
            "--detokenizer-worker-num", str(workers)]
    with launched(args, env, log, short_tmp) as up:
        server = up.server
        assert up.runtime.parent == short_tmp
        placed = _placement(up.serve)
        mask = sorted(up.tree[0].cpu_affinity())
        if stop == "sigterm":
            server.send_signal(signal.SIGTERM)
        elif stop == "sigint":
            server.send_signal(signal.SIGINT)
        elif stop == "ctrl-c":
            os.killpg(server.pid, signal.SIGINT)
        elif stop == "crash":
            _post(port, "/generate", {"text": CRASH, "sampling_params": {"max_new_tokens": 1}})
        code = server.wait(60)
        dirs, alive = settled(up.tree, short_tmp)
    _check_placement(placed, workers, pin, port, mask)
    if stop == "crash":
        assert code == -signal.SIGKILL, log.read_text()[-3000:]  # SGLang killed itself
    else:
        assert code in (0, -signal.SIGINT), log.read_text()[-3000:]
    assert dirs == [] and alive == [], log.read_text()[-3000:]


def test_a_dead_service_stops_a_server_of_tokenizer_workers(short_tmp: Path) -> None:
    """With --tokenizer-worker-num 2, SGLang's watchdog SIGQUIT does not stop its server
    when a detokenizer dies; a kill -9 of the service's supervisor must still stop it
    (as SGLang means to), leaving nothing, rather than leave its requests hanging."""
    python = sglang_python()
    if python is None:
        pytest.skip("SGLANG_PYTHON names no python importing SGLang 0.5.23 and sglang_tok")
    # the stand-in scheduler: its rows name their tokenizer worker, as SGLang's do
    env = {**os.environ, "SGLANG_PLUGINS": "sglang_tok,sglang_tok_standin",
           "SGLANG_TOK_STANDIN": "step_ms=20", "TMPDIR": str(short_tmp)}
    env.pop(cores.SETTING, None)
    log = short_tmp / "server.log"
    port = _free_port()
    args = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir(short_tmp)),
            "--device", "cpu", "--port", str(port), "--tokenizer-worker-num", "2",
            "--skip-server-warmup"]
    with launched(args, env, log, short_tmp) as up:
        up.serve.kill()
        code = up.server.wait(60)
        dirs, alive = settled(up.tree, short_tmp)
    text = log.read_text(errors="replace")
    assert "the detokenizer service" in text and "stopping the server" in text, text[-3000:]
    assert code is not None and dirs == [] and alive == [], text[-3000:]


WATCHED = """
import subprocess, sys, time
from sglang_tok.integrations.sglang.launcher import ServiceProcess, stop_server_on_exit
proc = ServiceProcess(subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]),
                      sys.argv[1])
if sys.argv[2] == "stopping":
    proc.terminate()  # SGLang ending it: an exit then is no failure
stop_server_on_exit(proc)
time.sleep(10)
print("still here")
"""


@pytest.mark.parametrize("case", ["failed", "stopping"])
def test_the_launcher_stops_itself_when_the_service_fails(tmp_path: Path, case: str) -> None:
    """The watcher SIGTERMs the launcher when the service ends with an error while nobody
    stops it, and not when SGLang is the one ending it."""
    r = subprocess.run([sys.executable, "-c", WATCHED, str(tmp_path / "rt"), case],
                       capture_output=True, text=True, timeout=60)
    if case == "failed":
        assert r.returncode == -signal.SIGTERM, (r.returncode, r.stdout, r.stderr[-2000:])
        assert "exited with 3; stopping the server" in r.stderr
    else:
        assert r.returncode == 0 and "still here" in r.stdout, r.stderr[-2000:]
