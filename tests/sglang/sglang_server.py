"""`python -m sglang.launch_server ARGS` as it is, with the scheduler stood in for
(`fake_scheduler.py`: no model loads on this CPU), so that SGLang's own launcher, HTTP
server, watchdog, signal handlers and shutdown run with the plugin.

    SGLANG_PLUGINS=sglang_tok python tests/sglang/sglang_server.py --model-path DIR ...
"""

from __future__ import annotations

import inspect
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spawned children import it too


def main() -> None:
    from fake_scheduler import run_fake_scheduler
    from sglang.srt.entrypoints import http_server

    launch = http_server.launch_server
    names = [p.name for p in inspect.signature(launch).parameters.values()
             if p.default is not inspect.Parameter.empty]
    defaults = list(launch.__defaults__ or ())
    defaults[names.index("run_scheduler_process_func")] = run_fake_scheduler
    launch.__defaults__ = tuple(defaults)
    sys.argv[0] = "sglang.launch_server"
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
