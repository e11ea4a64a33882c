"""A process that starts the service through the plugin's launcher and ends it as SGLang's
launcher process does, for `test_shutdown.py` (no SGLang needed).

It prints one JSON line (the service's pid and runtime directory) once the service is up,
then waits. SIGTERM and SIGINT end it as SGLang's `launch_server` ends: every descendant
gets SIGKILL (SGLang's `kill_process_tree(os.getpid(), include_parent=False)`), then the
process exits (0, or by SIGINT). The test sends everything else (SIGKILL of any process,
in any order) itself.

    python tests/sglang/launcher_host.py WORKDIR
"""

from __future__ import annotations

import json
import signal
import sys
import time
import types
from pathlib import Path

import psutil

from sglang_tok.integrations.sglang import launcher


def kill_descendants() -> None:
    """SGLang's kill_process_tree without the parent: SIGKILL, then wait for each."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=30)


def main() -> None:
    work = Path(sys.argv[1])
    serving = types.SimpleNamespace(tokenizer_path=None, skip_tokenizer_init=True,
                                    detokenizer_worker_num=1)
    ports = types.SimpleNamespace(detokenizer_ipc_name=f"ipc://{work}/detok.ipc",
                                  tokenizer_ipc_name=f"ipc://{work}/tok.ipc")
    proc = launcher.launch(launcher.service_args(serving, ports))
    deadline = time.monotonic() + 60
    while proc.http_port() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # SGLang's launcher raises KeyboardInterrupt on ^C; a host started from a shell without
    # job control inherits SIGINT ignored (bash does that to background jobs), so say it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print(json.dumps({"pid": proc.pid, "runtime": proc.runtime_dir,
                      "up": proc.http_port() is not None}), flush=True)
    try:
        while True:
            time.sleep(1)
    finally:
        kill_descendants()


if __name__ == "__main__":
    main()
