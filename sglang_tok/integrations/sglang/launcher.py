"""Start `sglang-tok serve --protocol sglang` for an SGLang server, from its own settings.

The service is one child of SGLang's launcher (`sglang-tok serve`, which supervises the
egress and shards): SGLang's watchdog polls it as it polls its own detokenizer, and its
shutdown ends it with the launcher's process tree. `--exit-with-parent` makes it drain and
exit if the launcher dies first.

Its runtime directory (ipc sockets, metrics, the HTTP port file) is made here, in the
launcher, and goes however the service ends, by three owners in turn: the service itself
(`--remove-runtime-dir`: every stop it lives through, the launcher's death included); the
janitor (`janitor.py`, outside SGLang's process tree: after a SIGKILL, which SGLang's
`kill_process_tree` sends at every shutdown and, on a crash, to its own launcher too); and
the launcher process's exit (`ServiceProcess.stop`, atexit), before which the directory is
gone whatever order SGLang killed things in.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ...process import cpu_list_text
from ...protocols.sglang.layout import Layout
from ...protocols.sglang.layout import write as write_layout

log = logging.getLogger("sglang_tok.plugin")
TOKENIZER_FILE = "tokenizer.json"
LAYOUT_FILE = "sglang-layout.json"
JANITOR = "sglang_tok.integrations.sglang.janitor"
STOP_S = 10.0  # at the launcher's exit, a service still running drains (5 s) and stops


class TokenizerNotFound(RuntimeError):
    pass


# seconds each of the service's processes has to its first heartbeat inside SGLang
BOOT_TIMEOUT_S = 180


def tokenizer_of(tokenizer_path: str | None, skip_tokenizer_init: bool) -> str:
    """The `--tokenizer` for SGLang's `tokenizer_path`: a directory or file holding
    `tokenizer.json` (an HF hub name is looked up in the local HF cache), or `none`."""
    if skip_tokenizer_init:
        return "none"
    if not tokenizer_path:
        raise TokenizerNotFound("SGLang gave no tokenizer_path")
    path = Path(tokenizer_path)
    if path.is_dir() and (path / TOKENIZER_FILE).is_file():
        return str(path)
    if path.is_file() and path.name.endswith(".json"):
        return str(path)
    if not path.exists():
        cached = _hub_cached(tokenizer_path)
        if cached is not None:
            return cached
    raise TokenizerNotFound(
        f"no {TOKENIZER_FILE} at --tokenizer-path {tokenizer_path!r}: sglang-tok decodes "
        f"with HF tokenizers' {TOKENIZER_FILE}; run without the plugin "
        "(SGLANG_PLUGINS set to the others) for this model")


def _hub_cached(repo: str) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo, TOKENIZER_FILE)
    return found if isinstance(found, str) else None


# a request that does not stream gets all its ids in one row; SGLang bounds neither
MAX_ROW_IDS = 1 << 22
MAX_RID_LENGTH = 1 << 16


def settings(server_args: Any) -> tuple[Any, Any]:
    """SGLang's resolved serving and observability settings: `runtime_context`'s views where
    the release has them (about 0.5.19 on), else `server_args` itself, which holds the same
    names in every release."""
    try:
        from sglang.srt.runtime_context import get_observability, get_serving
    except ImportError:
        return server_args, server_args
    try:
        return get_serving(), get_observability()
    except Exception:  # nothing published in this process: the arguments themselves
        return server_args, server_args


LOOPBACK = ("tcp://127.0.0.1:", "tcp://localhost:", "tcp://[::1]:")


def own_tree(endpoint: str, serving: Any) -> bool:
    """The detokenizer endpoint SGLang's own launcher made for this server on this host: an
    ipc:// path, or the loopback tcp:// port its single-node launcher derives for DP
    attention (`PortArgs.init_new`: nnodes 1, no dist_init_addr). Across nodes the endpoint
    takes other hosts' schedulers: their pickles are never unpickled (docs/sglang.md)."""
    if endpoint.startswith("ipc://"):
        return True
    single = int(getattr(serving, "nnodes", 1) or 1) == 1 \
        and not getattr(serving, "dist_init_addr", None)
    return single and endpoint.startswith(LOOPBACK)


def workers_of(serving: Any) -> int:
    """SGLang's `--detokenizer-worker-num` (1 by default, as SGLang's own): the shards."""
    return int(getattr(serving, "detokenizer_worker_num", 1) or 1)


def tokenizer_workers_of(serving: Any) -> int:
    """SGLang's `--tokenizer-worker-num` (1 by default): above 1, replies go to the worker
    each request came from."""
    return int(getattr(serving, "tokenizer_worker_num", 1) or 1)


def service_args(serving: Any, port_args: Any, keep_stop_ids: frozenset[int] = frozenset(),
                 cores: list[int] | None = None, record: str = "", own_tree: bool = False
                 ) -> list[str]:
    """`serve` flags for SGLang's serving settings and its ports: as many shards as SGLang
    has detokenizer workers (never the service's own default, which sizes itself by the
    host; one shard lives inside the egress's process, as SGLang's one detokenizer
    process decodes), pinned onto `cores` (the egress first: `cores.choose`) or not at
    all; `record`: a trace file for every scheduler message (SGLANG_TOK_RECORD)."""
    args = ["--protocol", "sglang",
            "--input", port_args.detokenizer_ipc_name,
            "--output", port_args.tokenizer_ipc_name,
            "--tokenizer", tokenizer_of(serving.tokenizer_path, serving.skip_tokenizer_init),
            "--http", "127.0.0.1:0", "--exit-with-parent",
            "--max-row-ids", str(MAX_ROW_IDS), "--max-rid-length", str(MAX_RID_LENGTH),
            "--shards", str(workers_of(serving)),
            # a shard that cuts SGLang's pickled columns imports SGLang first: tens of
            # seconds on a busy host, where the service's own 30 s boot limit killed it
            "--boot-timeout", str(BOOT_TIMEOUT_S)]
    if workers_of(serving) == 1:  # SGLang's default: one process decodes, as its own does
        args += ["--inline-shard"]
    args += ["--cores", cpu_list_text(cores)] if cores else ["--no-pin"]
    tokenizers = tokenizer_workers_of(serving)
    if tokenizers > 1:
        args += ["--sglang-tokenizer-workers", str(tokenizers)]
    if keep_stop_ids:
        args += ["--keep-stop-ids", ",".join(map(str, sorted(keep_stop_ids)))]
    if record:
        args += ["--record", record]
    if own_tree and not port_args.detokenizer_ipc_name.startswith("ipc://"):
        args += ["--sglang-own-tree"]
    return args


class ServiceProcess:
    """The service as SGLang's launcher sees a detokenizer process: `pid`, `is_alive()`,
    `exitcode`, `terminate()`, `kill()`, `join()` (what its watchdog and shutdown call on a
    `multiprocessing.Process`). Its runtime directory goes when it is reaped (and by the
    service's own hand, the janitor's, and `stop` at the launcher's exit)."""

    def __init__(self, popen: subprocess.Popen[bytes], runtime_dir: str) -> None:
        self.popen = popen
        self.runtime_dir = runtime_dir
        self.name = "sglang-tok"
        self.stopping = False  # SGLang (or the launcher's exit) is ending it

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def exitcode(self) -> int | None:
        code = self.popen.poll()
        if code is not None:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
        return code

    def is_alive(self) -> bool:
        return self.exitcode is None

    def terminate(self) -> None:
        """SIGTERM: the service drains what it accepted, then exits."""
        self.stopping = True
        if self.popen.poll() is None:
            self.popen.terminate()

    def kill(self) -> None:
        self.stopping = True
        if self.popen.poll() is None:
            self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return
        shutil.rmtree(self.runtime_dir, ignore_errors=True)

    def stop(self) -> None:
        """At the launcher process's exit (atexit): a service SGLang did not end is drained
        and stopped, and its runtime directory removed, before the launcher is gone."""
        self.stopping = True
        if self.popen.poll() is None:
            self.terminate()
            self.join(STOP_S)
        if self.popen.poll() is None:
            self.kill()
            self.popen.wait()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)

    def http_port(self) -> int | None:
        """The service's /health and /metrics port, once it has published it."""
        try:
            return int(Path(self.runtime_dir, "http.port").read_text())
        except (OSError, ValueError):
            return None


def launch(args: list[str], layout: Layout | None = None) -> ServiceProcess:
    """`sglang-tok serve ARGS` in a runtime directory of its own, which goes when it does;
    with the running SGLang's `layout`, written there for the service to read."""
    runtime = tempfile.mkdtemp(prefix="sglang-tok-")
    os.chmod(runtime, 0o700)
    if layout is not None:
        path = os.path.join(runtime, LAYOUT_FILE)
        write_layout(layout, path)
        args = [*args, "--sglang-layout", path]
    # -P: SGLang's working directory is the user's; a checkout of this project there would
    # shadow the installed package with its source folder, which lacks egress/ and shards/
    cmd = [sys.executable, "-P", "-m", "sglang_tok.serving.cli", "serve", "--runtime-dir", runtime,
           "--remove-runtime-dir", *args]
    proc = ServiceProcess(subprocess.Popen(cmd), runtime)
    start_janitor(proc.pid, runtime)
    atexit.register(proc.stop)
    return proc


def stop_server_on_exit(proc: ServiceProcess) -> threading.Thread:
    """With tokenizer workers, SGLang's watchdog SIGQUITs its launcher when a detokenizer
    dies, and that does not stop SGLang 0.5.23's server: its requests then hang (seen
    with its own detokenizer too). The service restarts its shards and egress itself; if
    the service as a whole ends with an error (its supervisor killed, or dead at start-up)
    while nobody is stopping it, the server is stopped as SGLang means to: a SIGTERM to
    the launcher, which its HTTP server's supervisor turns into a full shutdown."""

    def watch() -> None:
        code = proc.popen.wait()
        if code != 0 and not proc.stopping:
            log.error("sglang_tok: the detokenizer service (pid %d) exited with %d; "
                      "stopping the server (SGLang stops when its detokenizer dies)",
                      proc.pid, code)
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="sglang-tok-watch", daemon=True)
    thread.start()
    return thread


def start_janitor(pid: int, directory: str) -> None:
    """The janitor for the service `pid` (a child of this process, so its pid cannot be
    reused before this pidfd is open); it detaches at once, so this waits only for
    Python's start-up."""
    why = ""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:  # not Linux >= 5.3: the other two owners
        why = str(exc)
    else:
        try:
            started = subprocess.run([sys.executable, "-P", "-m", JANITOR, str(pidfd), directory],
                                     pass_fds=(pidfd,), timeout=60)
            why = f"it exited with {started.returncode}" if started.returncode else ""
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc)
        finally:
            os.close(pidfd)
    if why:  # the service runs all the same
        log.warning("sglang_tok: no janitor for %s (%s): a SIGKILL of the whole process "
                    "tree would leave it behind", directory, why)
