"""A newcomer's first ten minutes: each mistake is one line naming the flag, exit code 2,
nothing started and nothing left on disk; the README's commands (and the code of the kit's
page, docs/kit.md) run as copied.

Each `serve` here runs with a TMPDIR of its own (short: the runtime directory made in it
holds ipc socket paths), so a runtime directory made and left behind would show."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# the kit's page: the Python a frontend and a scheduler copy, the encode service's flags
KIT = (ROOT / "docs" / "kit.md").read_text()
CLI = [sys.executable, "-m", "sglang_tok.serving.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tmpdirs() -> Iterator[Path]:
    """Where each `serve`'s TMPDIR goes: short, and removed afterwards."""
    short = Path(tempfile.mkdtemp(prefix="sgt-"))
    yield short
    shutil.rmtree(short)


def _env(tmpdir: Path) -> dict[str, str]:
    tmpdir.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmpdir)}


def refused_all(tmpdirs: Path, cases: dict[str, list[str]]) -> dict[str, tuple[int, str, float]]:
    """Run every `serve` at once (each is a second of imports): (exit code, stderr,
    seconds) by case."""
    procs = {}
    for name, argv in cases.items():
        env = _env(tmpdirs / name)
        procs[name] = (subprocess.Popen([*CLI, "serve", *argv], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE),
                       time.monotonic())
    out = {}
    for name, (proc, t0) in procs.items():
        _, err = proc.communicate(timeout=120)
        out[name] = (proc.returncode, err, time.monotonic() - t0)
    return out


def assert_one_line(name: str, code: int, err: str, line: str) -> None:
    """Exit 2; stderr is the one error line (log lines of made and removed directories
    aside); no traceback; no process was started."""
    assert code == 2, (name, code, err)
    errors = [x for x in err.splitlines() if " INFO " not in x]
    assert len(errors) == 1 and re.fullmatch(line, errors[0]), (name, err)
    assert "Traceback" not in err and "started" not in err, (name, err)


def test_every_first_mistake_is_one_line_naming_the_flag(tmp_path: Path, tmpdirs: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    ctx = zmq.Context()
    live = ctx.socket(zmq.PULL)
    live.bind(f"ipc://{tmp_path}/live.ipc")
    (tmp_path / "file").write_text("keep me")
    free = ["--http", "127.0.0.1:0"]
    cases = {
        "input": ["--input", "foo", *free],
        "output": ["--output", "localhost:5555", *free],
        "scheme": ["--input", "inproc://ring", *free],
        "port": ["--output", "tcp://frontend:70000", *free],
        "http-syntax": ["--http", "8399"],
        "http-busy": ["--http", f"127.0.0.1:{port}"],
        "input-busy": ["--input", f"tcp://127.0.0.1:{port}", *free],
        "ipc-live": ["--input", f"ipc://{tmp_path}/live.ipc", *free],
        "ipc-file": ["--input", f"ipc://{tmp_path}/file", *free],
        "ipc-dir": ["--output", f"ipc://{tmp_path}/file/sub/deltas.ipc", *free],
        "encode": ["--encode", "ipc:///run/x/encode.ipc", *free],
        "tokenizer": ["--tokenizer", str(tmp_path / "nope"), *free],
        "bound": ["--shards", "0"],
        "argparse": ["--shards", "two"],
    }
    try:
        got = refused_all(tmpdirs, cases)
    finally:
        busy.close()
        live.close(0)
        ctx.term()
    want = {
        "input": re.escape("sglang-tok serve: error: --input: not an endpoint: expected "
                           "ipc://PATH or tcp://HOST:PORT (got 'foo')"),
        "output": re.escape("sglang-tok serve: error: --output: not an endpoint: expected "
                            "ipc://PATH or tcp://HOST:PORT; did you mean tcp://localhost:5555? "
                            "(got 'localhost:5555')"),
        "scheme": r"sglang-tok serve: error: --input: inproc:// reaches only .* \(got "
                  r"'inproc://ring'\)",
        "port": re.escape("sglang-tok serve: error: --output: port 70000 is out of range "
                          "(1-65535) (got 'tcp://frontend:70000')"),
        "http-syntax": r"sglang-tok serve: error: --http: expected HOST:PORT, .* \(got '8399'\)",
        "http-busy": rf"sglang-tok serve: error: --http: cannot listen: port {port} is in use "
                     rf"on 127.0.0.1 \(another sglang-tok serve\?\); pass another port, or port "
                     rf"0 for any free one \(got '127.0.0.1:{port}'\)",
        "input-busy": r"sglang-tok serve: error: --input: cannot bind: the address is in use "
                      r"\(another sglang-tok serve\?\) \(got 'tcp://127.0.0.1:\d+'\)",
        "ipc-live": r"sglang-tok serve: error: --input: another process is listening on that "
                    r"socket \(a service already running\?\) \(got 'ipc://.*/live.ipc'\)",
        "ipc-file": r"sglang-tok serve: error: --input: .*/file exists and is not a socket; "
                    r"refusing to replace it \(got 'ipc://.*/file'\)",
        "ipc-dir": r"sglang-tok serve: error: --output: .*/file is not a directory \(got .*\)",
        "encode": r"sglang-tok serve: error: --encode: the encode service is off without "
                  r"--encode-workers N \(got 'ipc:///run/x/encode.ipc'\)",
        "tokenizer": r"sglang-tok serve: error: --tokenizer: no tokenizer.json at .*",
        "bound": r"sglang-tok serve: error: --shards: expected int >= 1 \(got 0\)",
        "argparse": r"sglang-tok serve: error: argument --shards: invalid int value: 'two' "
                    r"\(see sglang-tok serve --help\)",
    }
    for name, (code, err, seconds) in got.items():
        assert_one_line(name, code, err, want[name])
        assert seconds < 30, (name, seconds)  # imports only: two cores shared by all cases
        assert list((tmpdirs / name).iterdir()) == [], name  # no runtime dir left
    assert (tmp_path / "file").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "live.ipc"]


def _readme_serve() -> list[str]:
    """The README's `sglang-tok serve` command beside a scheduler, as argv."""
    block = README.split("## Running it beside a scheduler", 1)[1].split("```sh\n", 1)[1]
    command = block.split("\n# ", 1)[0].replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[:2] == ["sglang-tok", "serve"], argv
    return argv


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", KIT, flags=re.S)


def _on(tmp: Path, text: str, port: int) -> str:
    """README text with its /run paths and HTTP port moved under `tmp` and to `port`."""
    return text.replace("/run/", f"{tmp}/run/").replace("127.0.0.1:8399", f"127.0.0.1:{port}")


def test_the_readme_runs_as_copied(tmp_path: Path, tmpdirs: Path) -> None:
    """The README's serve command (its ipc directories made by the service), its health
    command, each of its Python blocks against that service, and a second `serve` on the
    same flags; with its /run paths moved under the test's directory, and its port to a
    free one."""
    port = free_port()
    argv = _readme_serve()
    encode = re.search(r"`sglang-tok serve (--encode-workers \d+ --encode \S+)`", KIT)
    assert encode is not None
    argv += ["--exit-with-parent", *encode[1].split()]
    argv = [_on(tmp_path, a, port) for a in argv]
    log = open(tmp_path / "serve.log", "w+")
    env = _env(tmpdirs / "serve")
    serve = subprocess.Popen([*CLI, *argv[1:]], env=env, stdout=log, stderr=log)
    try:
        health = shlex.split(_on(tmp_path, re.search(r"\nsglang-tok health (.*?)  #", README)[1],  # type: ignore[index]
                                 port))
        deadline = time.monotonic() + 120
        while True:
            r = subprocess.run([*CLI, "health", *health], capture_output=True, text=True,
                               timeout=60)
            if r.returncode == 0:
                break
            assert serve.poll() is None and time.monotonic() < deadline, log.read()
            time.sleep(0.5)
        assert '"deep": "every process answered"' in r.stdout
        assert "made directory" in (tmp_path / "serve.log").read_text()
        blocks = _python_blocks()
        assert len(blocks) == 2, blocks
        outputs = []
        for code in blocks:
            run = subprocess.run([sys.executable, "-c", _on(tmp_path, code, port)],
                                 capture_output=True, text=True, timeout=120, env=env)
            assert run.returncode == 0, run.stderr
            outputs.append(run.stdout)
        assert re.fullmatch(r"1 \[\[.*\]\] \[\[\[0, 5\], .*\]\]\n", outputs[0]), outputs[0]
        assert outputs[1] == "Hello, world!\n"
        # a second `serve` with the same flags: one line, nothing of the first disturbed
        again = argv[2:]
        got = refused_all(tmpdirs, {"same": again, "same-ring": [
            *again[:again.index("--http")], *again[again.index("--http") + 2:], "--http",
            "127.0.0.1:0"]})
        assert_one_line("same", *got["same"][:2],
                        rf"sglang-tok serve: error: --http: cannot listen: port {port} is in "
                        r"use on 127.0.0.1 .*")
        assert_one_line("same-ring", *got["same-ring"][:2],
                        r"sglang-tok serve: error: --input: another process is listening on "
                        r"that socket .*")
        for name in got:
            assert list((tmpdirs / name).iterdir()) == [], name
        r = subprocess.run([*CLI, "health", *health], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout  # the first one is untouched
    finally:
        serve.terminate()
        assert serve.wait(60) == 0
        log.close()
    assert not (tmp_path / "run").exists()  # the directories it made are gone again
    assert list((tmpdirs / "serve").iterdir()) == []


def test_health_help_documents_every_flag() -> None:
    out = subprocess.run([*CLI, "health", "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    for flag_, words in (("--http HOST:PORT", "the service's --http"),
                         ("--timeout SECONDS", "how long to wait"),
                         ("--deep", "PING through the input ring")):
        assert flag_ in out and words in out, out


def test_the_demo_on_one_shard_says_one_shard(tmpdirs: Path) -> None:
    r = subprocess.run([*CLI, "demo", "--requests", "12", "--concurrency", "4", "--shards", "1"],
                       capture_output=True, text=True, timeout=180, env=_env(tmpdirs / "demo"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert " tokens through 1 shard in " in r.stdout and "exact: 12/12" in r.stdout, r.stdout
    assert list((tmpdirs / "demo").iterdir()) == []


def test_the_readme_is_a_page_and_its_links_lead_somewhere() -> None:
    """A newcomer reads it in five minutes: at most 150 lines, the rest in docs/, every
    link (README and docs) to a file that exists."""
    assert len(README.splitlines()) <= 150
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = re.sub(r"`[^`\n]*`", "", page.read_text())  # code spans are not links
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), (page.name, target)
