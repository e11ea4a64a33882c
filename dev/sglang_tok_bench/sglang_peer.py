"""SGLang's own detokenizer, for `sglang_bench.py` (`scripts/sglang/bench.py`): run with a
python that imports SGLang 0.5.23 (the side environment), never with the project's venv:

    python -m sglang_tok_bench.sglang_peer --work DIR

It takes SGLang's launcher steps as `Engine` takes them (ServerArgs, PortArgs, publish,
then `Engine._launch_detokenizer_subprocesses`), on CPU with no model: one
DetokenizerManager, or N behind SGLang's MultiDetokenizerRouter. The detokenizer binds
`--input` and PUSHes its BatchStrOutput replies to `--output`; the bench binds that.

Importing SGLang takes many CPU seconds, so one peer serves every SGLang system of a bench
run: it reads one JSON command per stdin line and answers one JSON line on stdout.

    {"cmd": "start", "workers": 2, "input": "ipc://...", "output": "ipc://...",
     "tokenizer_workers": 1, "metrics": false}
        -> {"pids": [...], "names": [...], "launch": "sglang.srt.entrypoints..."}
    {"cmd": "stop"}   -> {"stopped": [exit codes], "failed": a child SIGQUIT us}
    (end of input)    -> stops what runs, exits

The children are forked from this already-imported process (`--start-method fork`, the
default) rather than spawned as `Engine` does: a spawned child imports SGLang again, which
would make start-up dominate a short benchmark, and the start method changes nothing in
the DetokenizerManager's loop that is measured. `--start-method spawn` is SGLang's way.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

PLUGIN = "sglang_tok.integrations.sglang.plugin"


class Peer:
    """SGLang's detokenizer processes of one system at a time, and their stand-in model."""

    def __init__(self, work: Path, start_method: str) -> None:
        import multiprocessing as mp

        from sglang_tok_testkit.sglang_side import model_dir

        mp.set_start_method(start_method, force=True)
        self.work = work
        # PortArgs and the launcher make their ipc files with tempfile: keep them here
        tempfile.tempdir = str(work)
        self.model = model_dir(work)
        self.procs: list[Any] = []
        self.failed = False
        # a failing DetokenizerManager or router SIGQUITs its parent (SGLang's way of taking
        # the server down); here the failure is reported to the bench instead
        signal.signal(signal.SIGQUIT, self._child_failed)

    def _child_failed(self, signum: int, frame: Any) -> None:
        self.failed = True
        print("sglang_peer: a detokenizer process failed (SIGQUIT)", file=sys.stderr, flush=True)

    def start(self, workers: int, input_ep: str, output_ep: str, tokenizer_workers: int = 1,
              metrics: bool = False) -> dict[str, Any]:
        """SGLang's detokenizer for `workers` (above 1: its router and that many workers),
        its replies to each row's tokenizer worker where `tokenizer_workers` > 1 (SGLang's
        `--tokenizer-worker-num`), `--enable-metrics` as asked."""
        from sglang.srt.entrypoints.engine import Engine
        from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
        from sglang.srt.plugins import load_plugins
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import PortArgs, ServerArgs

        self.stop()
        self.failed = False
        load_plugins()
        launch = Engine._launch_detokenizer_subprocesses
        if PLUGIN in sys.modules or not launch.__module__.startswith("sglang."):
            raise RuntimeError("sglang-tok's plugin replaced SGLang's detokenizer launch: "
                               "SGLANG_PLUGINS was not honoured")
        server_args = ServerArgs(model_path=str(self.model), tokenizer_path=str(self.model),
                                 device="cpu", detokenizer_worker_num=workers,
                                 tokenizer_worker_num=tokenizer_workers,
                                 enable_metrics=metrics, log_level="warning")
        port_args = PortArgs.init_new(server_args)
        port_args.detokenizer_ipc_name = input_ep
        port_args.tokenizer_ipc_name = output_ep
        publish(server_args, role="tokenizer")
        procs, names = launch(
            server_args=server_args, port_args=port_args,
            run_detokenizer_process_func=run_detokenizer_process)
        self.procs = procs
        return {"pids": [p.pid for p in procs], "names": names,
                "launch": f"{launch.__module__}.{launch.__qualname__}"}

    def stop(self) -> list[int | None]:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        codes = []
        for p in self.procs:
            p.join(20)
            if p.is_alive():
                p.kill()
                p.join(5)
            codes.append(p.exitcode)
        self.procs = []
        return codes


def main() -> int:
    # msgpack IPC (the bytes the bench builds), and SGLang's detokenizer, not sglang-tok's
    # plugin: both are read when SGLang is imported, so they are set before that
    os.environ["SGLANG_USE_PICKLE_IPC"] = "0"
    os.environ["SGLANG_PLUGINS"] = "none"
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description="SGLang's own detokenizer, for the SGLang "
                                 "benchmark; one JSON command per stdin line.")
    ap.add_argument("--work", required=True, help="a directory for the model stub and ipc files")
    ap.add_argument("--start-method", choices=["fork", "spawn"], default="fork")
    a = ap.parse_args()
    peer = Peer(Path(a.work), a.start_method)
    # importing the launcher before the first command keeps its cost out of "start"
    from sglang.srt.entrypoints.engine import Engine  # noqa: F401

    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            try:
                if cmd["cmd"] == "start":
                    out: dict[str, Any] = peer.start(
                        int(cmd["workers"]), cmd["input"], cmd["output"],
                        int(cmd.get("tokenizer_workers", 1)), bool(cmd.get("metrics")))
                elif cmd["cmd"] == "stop":
                    failed = peer.failed
                    out = {"stopped": peer.stop(), "failed": failed}
                else:
                    out = {"error": f"unknown command {cmd['cmd']!r}"}
            except Exception as exc:  # the bench reports it and goes on with other systems
                out = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(out), flush=True)
    finally:
        peer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
