"""Who may connect: CURVE on tcp://, private ipc paths, no pickle anywhere."""

from __future__ import annotations

import ast
import errno
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import zmq
import zmq.auth
from local_service import LocalService

from sglang_tok import security
from sglang_tok.kit.client import Scheduler
from sglang_tok.kit.sync_frontend import Frontend, barrier
from sglang_tok.protocols.model import batch
from sglang_tok.security import Curve
from sglang_tok.tokenizer import load

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rebind(endpoint: str, timeout_s: float = 10.0) -> Frontend:
    """A plain Frontend on an endpoint just given up: libzmq closes a listener in its
    reaper thread, after close() returns, so the port can still be held for a moment."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return Frontend(endpoint)
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_curve_only_authorised_peers_push_frames_and_read_deltas(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    rc = subprocess.run([sys.executable, "-m", "sglang_tok.serving.cli", "keygen", str(keys)],
                        capture_output=True, timeout=60).returncode
    assert rc == 0
    inp, out = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    svc = LocalService(tmp_path, shards=1, args=["--curve-keys", str(keys)])
    svc.front.close()
    svc.front = Frontend(out, curve=security.frontend_server(str(keys)))
    auth = security.authenticator(svc.front.ctx, str(keys), security.SERVICE)
    svc.input, svc.output = inp, out
    svc.cmd[svc.cmd.index("--input") + 1] = inp
    svc.cmd[svc.cmd.index("--output") + 1] = out
    try:
        svc.start()
        svc.sched.close()  # type: ignore[union-attr]
        ids = load("deepseek-v4").tokenizer.encode("secret text").ids
        fin = {"type": "length", "length": len(ids)}
        # a scheduler with a key pair nobody authorised: its frames never reach the ring
        pub, sec = zmq.auth.create_certificates(str(tmp_path), "intruder")
        ipub, isec = zmq.auth.load_certificate(sec)
        intruder = Scheduler(inp, curve=Curve(ipub, isec or b"",
                                              security.service_server(str(keys)).public))
        intruder.send(batch.encode_batch([{"rid": "evil", "ids": ids, "finish": fin}]))
        # a plain-text scheduler: rejected too
        plain = Scheduler(inp)
        plain.send(batch.encode_batch([{"rid": "plain", "ids": ids, "finish": fin}]))
        good = Scheduler(inp, curve=security.scheduler_client(str(keys)))
        good.send(batch.encode_batch([{"rid": "good", "ids": ids, "finish": fin}]))
        assert barrier(good, svc.front, 1, 30)
        assert svc.front.requests["good"].text == "secret text"
        assert "evil" not in svc.front.requests and "plain" not in svc.front.requests
        assert svc.health()[1]["activity"] == 2  # the good frame and the PING, nothing else
        # a frontend without the frontend key cannot read deltas: nothing reaches it
        svc.front.close()
        thief = _rebind(out)
        good.send(batch.encode_batch([{"rid": "good2", "ids": ids, "finish": fin}]))
        assert not thief.poll(1.5)
        thief.close()
        for s in (intruder, plain, good):
            s.close()
    finally:
        auth.stop()
        svc.stop()


def test_runtime_dir_and_ipc_sockets_are_private(tmp_path: Path) -> None:
    svc = LocalService(tmp_path, shards=1).start()
    try:
        assert stat.S_IMODE(svc.runtime.stat().st_mode) == 0o700
        for sock in svc.runtime.glob("*.ipc"):
            assert stat.S_IMODE(sock.stat().st_mode) == 0o600, sock
    finally:
        svc.stop()


def test_http_binds_loopback_by_default() -> None:
    from sglang_tok.config import Config
    assert Config().http.startswith("127.0.0.1:")


# SGLang's own pickled columns, cut per row, from SGLang's own process tree only
# (`config.from_sglang`: an ipc:// input; test_beams_and_time_stats has both sides)
PICKLED = ROOT / "sglang_tok" / "protocols" / "sglang" / "pickled.py"
# the stand-in scheduler (a distribution of its own, never part of `sglang-tok serve`) is
# SGLang's scheduler: on 0.5.12-0.5.14 SGLang's own IPC is pickles, every use of them in
# this one module
STANDIN_PICKLES = ROOT / "standin" / "sglang_tok_standin" / "pickles.py"
UNPICKLERS = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve"}


def test_no_pickle_anywhere_in_the_service() -> None:
    """Nothing that touches a socket may deserialise code: no pickle, no recv_pyobj; but
    one module of the service, for SGLang's own pickles from SGLang's own process tree (and
    one of the stand-in scheduler's, for the releases whose IPC is pickles). The test kit
    and the tools (dev/) touch sockets too."""
    paths = [p for d in ("sglang_tok", "ring", "egress", "shards", "standin", "dev")
             for p in (ROOT / d).rglob("*.py")
             if p not in (PICKLED, STANDIN_PICKLES) and "build" not in p.parts]
    assert len(paths) > 30 and PICKLED.exists() and STANDIN_PICKLES.exists()
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom) and node.level:
                    names = [a.name for a in node.names]  # the project's own modules
                else:
                    names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not any(n.split(".")[0] in UNPICKLERS for n in names), path
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("recv_pyobj", "send_pyobj", "recv_serialized"), path
