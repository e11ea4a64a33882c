"""The plugin inside one SGLang release's own code, whichever release the python imports
(0.5.12-0.5.23): that release loads the plugin, its `Engine` launcher starts the service in
its detokenizer's place, this script stands in for its scheduler (it PUSHes the release's
own golden messages, `tests/golden/sglang/releases/RELEASE/`) and for its TokenizerManager
(it binds `tokenizer_ipc_name` and reads each reply with the release's own decoder:
`sock_recv`, or `recv_pyobj` for the pickle-IPC releases). Every reply is compared with what
that release's real DetokenizerManager answered to the same messages. Prints one JSON line;
`tests/sglang/test_releases.py` runs it.

    PYTHONPATH=RELEASE_SITE python tests/sglang/release_dropin.py GOLDEN_RELEASE_DIR WORKDIR
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("SGLANG_PLUGINS", "sglang_tok")


def main() -> None:
    golden, work = Path(sys.argv[1]), Path(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    import sglang
    import zmq
    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.managers import io_struct
    from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import PortArgs, ServerArgs

    from sglang_tok_testkit.sglang_side import frames, model_dir

    load_plugins()
    receive = getattr(io_struct, "sock_recv", None) or (lambda sock: sock.recv_pyobj())
    decode = getattr(io_struct, "msgpack_decode", None) or pickle.loads
    manifest = json.loads((golden / "manifest.json").read_text())
    report: dict[str, Any] = {"release": sglang.__version__, "ipc": manifest["ipc"]}
    mdir = model_dir(work)
    server_args = ServerArgs(model_path=str(mdir), tokenizer_path=str(mdir), device="cpu",
                             detokenizer_worker_num=workers)
    port_args = PortArgs.init_new(server_args)
    try:
        from sglang.srt.runtime_context import publish

        publish(server_args, role="tokenizer")
    except ImportError:
        pass  # a release before runtime_context: its settings are the ServerArgs
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
    cases: dict[str, Any] = {}
    for case, spec in manifest["cases"].items():
        if case == "http_workers":
            continue  # the workers' sockets are the TokenizerWorkers'
        for msg in frames(golden / f"{case}.in.bin"):
            push.send(msg)
        ours: dict[str, list[dict[str, Any]]] = {}
        ended: set[str] = set()
        deadline = time.monotonic() + 60
        while ended != set(spec["exact"]) and time.monotonic() < deadline:
            if not pull.poll(500):
                continue
            out = receive(pull)  # the release's own decoder: its BatchStrOutput
            assert type(out).__name__ == "BatchStrOutput", type(out)
            for rid, row in _rows(out):
                ours.setdefault(rid, []).append(row)
                if row["finished_reasons"] is not None:
                    ended.add(rid)
        theirs: dict[str, list[dict[str, Any]]] = {}
        for msg in frames(golden / f"{case}.out.bin"):
            for rid, row in _rows(decode(msg)):
                theirs.setdefault(rid, []).append(row)
        same = 0
        for rid in spec["exact"]:
            a, b = ours.get(rid, []), theirs.get(rid, [])
            strip = [{k: v for k, v in r.items() if k != "output_strs"} for r in a]
            same += len(a) == len(b) and strip == [
                {k: v for k, v in r.items() if k != "output_strs"} for r in b]
        cases[case] = {"requests": len(spec["exact"]), "ended": len(ended),
                       "exact": sum("".join(r["output_strs"] for r in ours.get(rid, []))
                                    == text for rid, text in spec["exact"].items()),
                       "rows_as_sglang": same}
    report["cases"] = cases
    proc = procs[0]
    report["alive"] = proc.is_alive()
    proc.terminate()
    proc.join(30)
    report["exitcode"] = proc.exitcode
    print(json.dumps(report))


def _plain(value: Any) -> Any:
    """A field as JSON carries it (arrays and tensors as lists, objects as their fields)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "__struct_fields__"):
        return {f: _plain(getattr(value, f)) for f in value.__struct_fields__}
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items()}
    return value


def _rows(msg: Any) -> list[tuple[str, dict[str, Any]]]:
    names = getattr(msg, "__struct_fields__", None) or list(vars(msg))
    fields = {name: getattr(msg, name) for name in names if name != "rids"}
    n = len(msg.rids)
    return [(rid, {k: _plain(v[i] if isinstance(v, list) and len(v) == n else v)
                   for k, v in fields.items()}) for i, rid in enumerate(msg.rids)]


if __name__ == "__main__":
    main()
