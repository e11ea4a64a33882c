"""The plugin inside SGLang's own code: run with a python that imports SGLang 0.5.23.

SGLang's launcher steps as `Engine` takes them (ServerArgs, PortArgs, publish, the plugins,
then `Engine._launch_detokenizer_subprocesses`), on CPU, with no model: what is launched is
the detokenizer, and this script stands in for the scheduler (it PUSHes the golden
`BatchTokenIDOutput` messages to `detokenizer_ipc_name`) and for the TokenizerManager (it
binds `tokenizer_ipc_name` and reads each reply with SGLang's own `sock_recv`). It then
kills a shard and the egress under load, and checks what SGLang's watchdog would see.
Prints one JSON line; `tests/sglang/test_plugin.py` runs it.

    python tests/sglang/real_sglang.py GOLDEN_DIR WORKDIR [DETOKENIZER_WORKERS]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("SGLANG_PLUGINS", "sglang_tok")


def main() -> None:
    golden, work = Path(sys.argv[1]), Path(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    import zmq
    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.managers import io_struct
    from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import PortArgs, ServerArgs

    from sglang_tok_testkit.sglang_side import frames, model_dir

    load_plugins()
    report: dict[str, Any] = {"pickle_ipc": io_struct._USE_PICKLE_IPC,
                              "env": os.environ.get("SGLANG_USE_PICKLE_IPC")}
    mdir = model_dir(work)
    server_args = ServerArgs(model_path=str(mdir), tokenizer_path=str(mdir), device="cpu",
                             detokenizer_worker_num=workers)
    port_args = PortArgs.init_new(server_args)
    publish(server_args, role="tokenizer")
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(port_args.tokenizer_ipc_name)
    procs, names = Engine._launch_detokenizer_subprocesses(
        server_args=server_args, port_args=port_args,
        run_detokenizer_process_func=run_detokenizer_process)
    report["names"] = names
    report["hooked"] = type(procs[0]).__module__
    push = ctx.socket(zmq.PUSH)
    push.connect(port_args.detokenizer_ipc_name)
    manifest = json.loads((golden / "manifest.json").read_text())
    cases: dict[str, Any] = {}
    for case, spec in manifest["cases"].items():
        if case == "http_workers":
            continue  # the workers' sockets are the TokenizerWorkers'; tests/sglang covers it
        for msg in frames(golden / f"{case}.in.bin"):
            push.send(msg)
        texts: dict[str, str] = {}
        finished: dict[str, Any] = {}
        ids: dict[str, list[int]] = {}
        deadline = time.monotonic() + 60
        while len(finished) < spec["requests"] and time.monotonic() < deadline:
            if not pull.poll(500):
                continue
            out = io_struct.sock_recv(pull)  # SGLang's own decoder, typed BatchStrOutput
            assert type(out).__name__ == "BatchStrOutput", type(out)
            for i, rid in enumerate(out.rids):
                texts[rid] = texts.get(rid, "") + out.output_strs[i]
                ids.setdefault(rid, []).extend(out.output_ids[i])
                if out.finished_reasons[i] is not None:
                    finished[rid] = out.finished_reasons[i]
        ref_fin: dict[str, Any] = {}
        ref_ids: dict[str, list[int]] = {}
        for msg in frames(golden / f"{case}.out.bin"):
            out = io_struct.msgpack_decode(msg)
            for i, rid in enumerate(out.rids):
                ref_ids.setdefault(rid, []).extend(out.output_ids[i])
                if out.finished_reasons[i] is not None:
                    ref_fin[rid] = out.finished_reasons[i]
        cases[case] = {
            "requests": spec["requests"], "finished": len(finished),
            "exact": sum(texts.get(r) == t for r, t in spec["exact"].items()),
            "finish_same": finished == ref_fin, "ids_same": ids == ref_ids}
    report["cases"] = cases
    report["faults"] = faults(procs[0], push, pull, io_struct)
    proc = procs[0]
    report["alive"] = proc.is_alive()
    proc.terminate()
    proc.join(30)
    report["exitcode"] = proc.exitcode
    print(json.dumps(report))


def faults(proc: Any, push: Any, pull: Any, io_struct: Any) -> dict[str, Any]:
    """Kill -9 a shard, then the egress, with requests in flight: the dead process's end
    with an abort row, the others with their own last row; the watchdog's view stays
    'alive'."""
    import psutil

    from sglang_tok.protocols.sglang import wire

    text_ids = [30602, 14, 2058, 3, 671, 4787, 13336, 38744, 32009, 1060, 270, 33101, 6397]
    children = psutil.Process(proc.pid).children()
    out: dict[str, Any] = {}
    for kind in ("shard", "egress"):
        victim = next((c for c in children if kind in " ".join(c.cmdline())
                       or kind in c.name()), None)
        if victim is None:  # one shard, inside the egress's process (--inline-shard)
            victim = next(c for c in children if "egress" in c.name())
        rids = [f"{kind}-{i}" for i in range(8)]
        for step in range(3):
            push.send(wire.encode_token_ids(_rows(rids, text_ids[step:step + 1], step + 1)))
        time.sleep(0.5)
        os.kill(victim.pid, signal.SIGKILL)
        time.sleep(1.0)
        last = _rows(rids, text_ids[3:4], 4)
        last["finished_reasons"] = [{"type": "length", "length": 4}] * len(rids)
        push.send(wire.encode_token_ids(last))  # the scheduler knows of no fault
        ended: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while len(ended) < len(rids) and time.monotonic() < deadline:
            if pull.poll(500):
                msg = io_struct.sock_recv(pull)
                for i, rid in enumerate(msg.rids):
                    if msg.finished_reasons[i] is not None and rid in rids:
                        ended[rid] = msg.finished_reasons[i]
        out[kind] = {"ended": len(ended),
                     "aborts": sum(f.get("type") == "abort" for f in ended.values()),
                     "alive": proc.is_alive()}
        children = psutil.Process(proc.pid).children()
    return out


def _rows(rids: list[str], ids: list[int], completion: int) -> dict[str, list[Any]]:
    n = len(rids)
    return {"rids": rids, "http_worker_ipcs": [None] * n, "finished_reasons": [None] * n,
            "decoded_texts": [""] * n, "decode_ids": [ids] * n, "read_offsets": [0] * n,
            "output_ids": [ids] * n, "skip_special_tokens": [True] * n,
            "spaces_between_special_tokens": [True] * n, "no_stop_trim": [False] * n,
            "prompt_tokens": [3] * n, "reasoning_tokens": [0] * n,
            "completion_tokens": [completion] * n, "cached_tokens": [0] * n}


if __name__ == "__main__":
    main()
