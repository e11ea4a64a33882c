"""Endpoint flags are checked before anything starts: each refusal is one line naming the
flag, and a directory an ipc socket needs is made (mode 0700) and removed again."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import zmq

from sglang_tok import endpoints
from sglang_tok.config import Config, ConfigError, check_binds, discard, finalize
from sglang_tok.endpoints import EndpointError, Ipc, Tcp


@pytest.mark.parametrize("value, bind, want", [
    ("ipc:///run/x/input.ipc", True, Ipc("/run/x/input.ipc")),
    ("ipc://@abstract", True, Ipc("@abstract")),
    ("ipc://rel.ipc", False, Ipc("rel.ipc")),
    ("tcp://*:5555", True, Tcp("*", 5555)),
    ("tcp://127.0.0.1:5555", False, Tcp("127.0.0.1", 5555)),
    ("tcp://[::1]:5555", True, Tcp("[::1]", 5555)),
    ("tcp://eth0:5555", True, Tcp("eth0", 5555)),
    ("tcp://frontend.internal:5555", False, Tcp("frontend.internal", 5555)),
    ("tcp://10.0.0.1;frontend:5555", False, Tcp("frontend", 5555)),
])
def test_endpoints_libzmq_takes_are_taken(value: str, bind: bool, want: object) -> None:
    assert endpoints.parse(value, bind=bind) == want


@pytest.mark.parametrize("value, bind, words", [
    ("foo", True, "expected ipc://PATH or tcp://HOST:PORT"),
    ("localhost:5555", False, "did you mean tcp://localhost:5555?"),
    ("/run/x.ipc", True, "did you mean ipc:///run/x.ipc?"),
    ("inproc://x", True, "inproc:// reaches only sockets of the same process"),
    ("udp://x:1", False, "udp:// is not supported"),
    ("ipc://", True, "empty ipc:// path"),
    ("ipc://*", True, "random path"),
    ("ipc:///tmp/" + "a" * 120, True, "longer than the 107"),
    ("ipc:///tmp/dir/", True, "names a directory"),
    ("tcp://localhost", False, "expected tcp://HOST:PORT"),
    ("tcp://:5555", True, "expected tcp://HOST:PORT"),
    ("tcp://localhost:0", False, "random port"),
    ("tcp://*:*", True, "random port"),
    ("tcp://localhost:70000", False, "port 70000 is out of range"),
    ("tcp://localhost:http", False, "port 'http' is not a number"),
    ("tcp://*:5555", False, "* is for binding"),
    ("tcp://127.0.0.256:5555", True, "is not an IPv4 address"),
    ("tcp://::1:5555", True, "in brackets"),
    ("tcp://[::1:5555", True, "closing ]"),
    ("tcp://[nope]:5555", True, "is not an IPv6 address"),
    ("tcp://a b:5555", True, "is not a host name or address"),
])
def test_bad_endpoints_are_refused_saying_why(value: str, bind: bool, words: str) -> None:
    with pytest.raises(EndpointError) as exc:
        endpoints.parse(value, bind=bind)
    assert words in str(exc.value)


@pytest.mark.parametrize("value, words", [
    ("8399", "expected HOST:PORT"),
    (":8399", "expected HOST:PORT"),
    ("http://127.0.0.1:8399", "without a scheme"),
    ("127.0.0.1:65536", "out of range"),
    ("127.0.0.1:x", "not a number"),
])
def test_bad_http_values_are_refused(value: str, words: str) -> None:
    with pytest.raises(EndpointError) as exc:
        endpoints.parse_http(value)
    assert words in str(exc.value)
    assert endpoints.parse_http("[::1]:0") == ("::1", 0)


def _finalize(tmp_path: Path, **fields: object) -> Config:
    return finalize(Config(runtime_dir=str(tmp_path / "rt"), **fields))  # type: ignore[arg-type]


@pytest.mark.parametrize("fields, line", [
    ({"input": "foo"}, "--input: not an endpoint: expected ipc://PATH or tcp://HOST:PORT "
                       "(got 'foo')"),
    ({"output": "localhost:5555"}, "--output: not an endpoint: expected ipc://PATH or "
                                   "tcp://HOST:PORT; did you mean tcp://localhost:5555? "
                                   "(got 'localhost:5555')"),
    ({"http": "8399"}, "--http: expected HOST:PORT"),
    ({"input": "tcp://*:5555", "output": "tcp://*:5555"}, "--output: * is for binding"),
    ({"input": "ipc:///tmp/a.ipc", "output": "ipc:///tmp/a.ipc"},
     "--output: the same endpoint as --input (got 'ipc:///tmp/a.ipc')"),
    ({"encode": "ipc:///tmp/e.ipc"}, "--encode: the encode service is off without "
                                     "--encode-workers N"),
])
def test_a_refused_value_names_its_flag_and_makes_nothing(
        tmp_path: Path, fields: dict[str, object], line: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _finalize(tmp_path, **fields)
    assert str(exc.value).startswith(line), str(exc.value)
    assert not (tmp_path / "rt").exists()


def test_ipc_directories_are_made_private_and_removed_with_the_runtime_dir(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    made: list[Path] = []
    caplog.set_level("INFO", "sglang_tok.config")
    cfg = finalize(Config(runtime_dir=str(tmp_path / "a" / "rt"),
                          input=f"ipc://{tmp_path}/run/sglang-tok/input.ipc",
                          output=f"ipc://{tmp_path}/run/frontend/deltas.ipc"), made)
    assert made == [tmp_path / "a", tmp_path / "a" / "rt", tmp_path / "run",
                    tmp_path / "run" / "sglang-tok", tmp_path / "run" / "frontend"]
    for d in made:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert f"made directory {tmp_path}/run/sglang-tok (mode 0700) for --input" in caplog.text
    (tmp_path / "a" / "rt" / "egress.journal").touch()  # a crashed egress's
    (tmp_path / "run" / "frontend" / "deltas.ipc").touch()  # a frontend's, still there
    discard(made, cfg.runtime_dir)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "run", "run/frontend", "run/frontend/deltas.ipc"]


def test_a_runtime_dir_given_to_remove_is_removed_whole_and_only_when_empty(
        tmp_path: Path) -> None:
    """--remove-runtime-dir: a launcher made the directory for the service alone, so the
    service removes it at its stop (with whatever is in it then); a directory that held
    anything before is refused, and left as it was."""
    rt = tmp_path / "rt"
    rt.mkdir()
    made: list[Path] = []
    cfg = finalize(Config(runtime_dir=str(rt), remove_runtime_dir=True), made)
    assert made == [rt]
    (rt / "egress.journal").touch()
    discard(made, cfg.runtime_dir)
    assert not rt.exists()
    kept: list[Path] = []
    finalize(Config(runtime_dir=str(tmp_path / "kept")), kept)
    assert kept == [tmp_path / "kept"]  # made by the service: removed as before
    shutil.rmtree(tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    kept = []
    finalize(Config(runtime_dir=str(tmp_path / "kept")), kept)
    assert kept == []  # there before, and not given to remove: it stays
    (tmp_path / "kept" / "mine").touch()
    with pytest.raises(ConfigError, match="--remove-runtime-dir: --runtime-dir is not empty"):
        finalize(Config(runtime_dir=str(tmp_path / "kept"), remove_runtime_dir=True), [])
    assert (tmp_path / "kept" / "mine").exists()


@pytest.mark.parametrize("stop", ["sigterm", "boot-failure"])
def test_serve_removes_the_runtime_dir_it_was_given_to_remove(tmp_path: Path, stop: str) -> None:
    """The service is the directory's owner: it goes on a drained stop and on a failed one."""
    rt = Path(tempfile.mkdtemp(prefix="sgt-"))  # short: the ipc paths live in it
    try:
        extra = ["--boot-timeout", "0.05"] if stop == "boot-failure" else []
        proc = subprocess.Popen([sys.executable, "-m", "sglang_tok.serving.cli", "serve", "--shards", "1",
                                 "--tokenizer", "none", "--no-pin", "--http", "127.0.0.1:0",
                                 "--runtime-dir", str(rt), "--remove-runtime-dir",
                                 "--drain-timeout", "1", *extra],
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while stop == "sigterm" and not (rt / "http.port").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        if stop == "sigterm":
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == (0 if stop == "sigterm" else 3)
        assert not rt.exists()
    finally:
        shutil.rmtree(rt, ignore_errors=True)


def test_a_directory_that_cannot_be_made_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=rf"--input: {tmp_path}/file is not a directory"):
        _finalize(tmp_path, input=f"ipc://{tmp_path}/file/sub/input.ipc",
                  output=f"ipc://{tmp_path}/out/x.ipc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    (tmp_path / "file").write_text("data")
    with pytest.raises(ConfigError, match="exists and is not a socket; refusing to replace"):
        _finalize(tmp_path, input=f"ipc://{tmp_path}/file")
    with pytest.raises(ConfigError, match="--runtime-dir: .*file is not a directory"):
        finalize(Config(runtime_dir=str(tmp_path / "file" / "rt")))


def test_a_fresh_runtime_dir_is_removed_when_a_flag_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="sgt-"))  # room for the ipc paths of a runtime dir
    try:
        monkeypatch.setattr("tempfile.tempdir", str(short))
        (short / "file").write_text("")
        with pytest.raises(ConfigError, match="--output"):
            finalize(Config(output=f"ipc://{short}/file/x.ipc"), [])
        assert [p.name for p in short.iterdir()] == ["file"]
    finally:
        shutil.rmtree(short)


def test_busy_endpoints_are_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = _finalize(tmp_path, http=f"127.0.0.1:{port}")
        with pytest.raises(ConfigError, match=rf"--http: cannot listen: port {port} is in use "
                                              rf"on 127.0.0.1 .*\(got '127.0.0.1:{port}'\)"):
            check_binds(cfg)
        cfg = _finalize(tmp_path, http="127.0.0.1:0", input=f"tcp://127.0.0.1:{port}")
        with pytest.raises(ConfigError, match=r"--input: cannot bind: the address is in use"):
            check_binds(cfg)
    ctx = zmq.Context()
    live = ctx.socket(zmq.PULL)
    try:
        live.bind(f"ipc://{tmp_path}/live.ipc")
        cfg = _finalize(tmp_path, http="127.0.0.1:0", input=f"ipc://{tmp_path}/live.ipc")
        with pytest.raises(ConfigError, match="--input: another process is listening"):
            check_binds(cfg)
        cfg = _finalize(tmp_path, http="127.0.0.1:0", encode_workers=1,
                        encode=f"ipc://{tmp_path}/live.ipc")
        with pytest.raises(ConfigError, match="--encode: another process is listening"):
            check_binds(cfg)
    finally:
        live.close(0)
        ctx.term()
    cfg = _finalize(tmp_path, http="127.0.0.1:0", input=f"ipc://{tmp_path}/free.ipc")
    check_binds(cfg)  # a free one is bound and let go: nothing is left of it
    assert not (tmp_path / "free.ipc").exists()


def test_a_stale_socket_file_is_no_obstacle(tmp_path: Path) -> None:
    stale = tmp_path / "stale.ipc"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # closed without unlinking: what a killed process leaves
    assert stale.is_socket() and not endpoints.listening(str(stale))
    check_binds(_finalize(tmp_path, http="127.0.0.1:0", input=f"ipc://{stale}"))
    assert os.path.isdir(tmp_path / "rt")


def test_an_empty_placeholder_file_is_bound_over(tmp_path: Path) -> None:
    """SGLang reserves its ipc names with tempfile.NamedTemporaryFile(delete=False): the
    plugin's service binds where an empty file stands, as SGLang's own detokenizer does."""
    import zmq

    (tmp_path / "placeholder").touch()
    cfg = _finalize(tmp_path, input=f"ipc://{tmp_path}/placeholder")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    try:
        sock.bind(cfg.input)
    finally:
        sock.close(linger=0)
        ctx.term()
