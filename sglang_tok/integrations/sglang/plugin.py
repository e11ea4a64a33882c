"""The SGLang plugin: sglang-tok runs where SGLang would start its detokenizer processes.

SGLang loads every entry point of the group `sglang.srt.plugins` (or those `SGLANG_PLUGINS`
names) in each process, early: the launcher's `Engine.__init__` does it before any child
starts. `register` then does two things there:

- it puts every SGLang process on msgpack IPC, the encoding the service reads: the
  variable is read when `io_struct` is imported, so it is set in the environment the
  children inherit, and in the module when the launcher has imported it already;
- it replaces `Engine._launch_detokenizer_subprocesses`, the one launcher step both
  `sglang serve` and `Engine` take (the class `DetokenizerManager` is bound as a default
  argument, so replacing it changes nothing; `run_detokenizer_process` is re-imported in
  the spawned child, so a patch of it is lost there).

The hook sizes the service by SGLang (`--detokenizer-worker-num` shards) and reads the
plugin's settings, `SGLANG_TOK_PIN` (`cores.py`) and `SGLANG_TOK_RECORD` (a trace of every
scheduler message), here in SGLang's launcher process: what runs below it gets flags and
reads no environment.

The stand-in scheduler has an entry point of its own (`sglang_tok_standin/plugin.py`).

Importing this module imports nothing of SGLang; only `register` and the hooks do.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger("sglang_tok.plugin")
TARGET = "sglang.srt.entrypoints.engine.Engine._launch_detokenizer_subprocesses"
PICKLE_IPC = "SGLANG_USE_PICKLE_IPC"
# a trace file: every scheduler message the service receives, recorded for the stand-in
# scheduler to replay on another machine (standin/record.py)
RECORD_ENV = "SGLANG_TOK_RECORD"


# set to 1: a release the service does not serve runs SGLang's own detokenizer, said in one
# line, instead of stopping at start
FALLBACK_ENV = "SGLANG_TOK_FALLBACK"


def register() -> None:
    """SGLang's entry point: msgpack IPC everywhere, and the launcher hook."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    use_msgpack_ipc()
    HookRegistry.register(TARGET, launch_detokenizer, HookType.AROUND)


def use_msgpack_ipc() -> None:
    """msgpack IPC in this process and in every process it starts from now on."""
    if os.environ.get(PICKLE_IPC, "").lower() in ("1", "true", "yes"):
        log.warning("sglang_tok: %s=%s overridden: the service reads msgpack IPC",
                    PICKLE_IPC, os.environ[PICKLE_IPC])
    os.environ[PICKLE_IPC] = "0"
    io_struct = sys.modules.get("sglang.srt.managers.io_struct")
    if io_struct is not None:  # read at its import: this process chose already
        io_struct._USE_PICKLE_IPC = False  # type: ignore[attr-defined]


def launch_detokenizer(original: Any, cls: Any, server_args: Any, port_args: Any,
                       run_detokenizer_process_func: Any = None, **kwargs: Any
                       ) -> tuple[list[Any], list[str]]:
    """`Engine._launch_detokenizer_subprocesses`, by sglang-tok: the service bound where
    the scheduler pushes, replying where the TokenizerManager pulls, reading the running
    release's messages by field name; SGLang's `(processes, names)` for its watchdog and
    shutdown. A release it does not serve stops the server at start in one line, or, with
    SGLANG_TOK_FALLBACK=1, is served by SGLang's own detokenizer (`original`)."""
    from ...own_packages import foreign_package

    why = foreign_package()  # before the launcher imports ring
    if why is not None:
        raise SystemExit(f"sglang_tok: {why}.")
    from ...protocols.sglang.layout import describe, read_running
    from .launcher import (
        launch,
        own_tree,
        service_args,
        settings,
        stop_server_on_exit,
        tokenizer_workers_of,
        workers_of,
    )

    layout = read_running()
    serving, observability = settings(server_args)
    trusted = own_tree(port_args.detokenizer_ipc_name, serving)
    why = layout.refusal()
    if why is None and layout.ipc == "pickle" and not trusted:
        why = (f"sglang-tok does not serve SGLang {layout.release} here: it sends pickled "
               f"messages, and {port_args.detokenizer_ipc_name} is not SGLang's own "
               "single-node process tree")
    if why is not None:
        if os.environ.get(FALLBACK_ENV, "").lower() in ("1", "true", "yes"):
            log.warning("sglang_tok: %s; SGLang's own detokenizer serves this server "
                        "(%s=1)", why, FALLBACK_ENV)
            return original(cls, server_args, port_args, run_detokenizer_process_func,
                            **kwargs)  # type: ignore[no-any-return]
        raise SystemExit(f"sglang_tok: {why}. Set {FALLBACK_ENV}=1 to run SGLang's own "
                         "detokenizer instead, or uninstall sglang-tok.")
    cores = placement(server_args, workers_of(serving))
    args = service_args(serving, port_args, kept_stop_ids(serving), cores,
                        record=os.environ.get(RECORD_ENV, ""), own_tree=trusted)
    proc = launch(args, layout)
    log.info("sglang_tok: detokenizer is sglang-tok (pid %d) for %s: %s", proc.pid,
             describe(layout), " ".join(args))
    if tokenizer_workers_of(serving) > 1:
        stop_server_on_exit(proc)  # SGLang's own watchdog does not stop such a server
    if getattr(observability, "enable_metrics", False):
        report_cpu(proc.pid)
    return [proc], ["detokenizer"]


CPU_METRIC = "sglang:process_cpu_seconds_total"


def report_cpu(pid: int, interval: float = 5.0) -> threading.Thread:
    """SGLang's detokenizer reports its CPU seconds with --enable-metrics
    (`start_cpu_monitor_thread("detokenizer")`); the service's processes together report
    them here, under the same name and label, from SGLang's launcher process (whose
    Prometheus files SGLang's /metrics reads)."""
    import psutil
    from prometheus_client import Counter

    counter = Counter(CPU_METRIC, "Total CPU time consumed by this process (user + system)",
                      ["component"], registry=None).labels(component="detokenizer")
    last: dict[int, float] = {}

    def spent() -> float:
        delta = 0.0
        try:
            procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return 0.0
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            now = t.user + t.system
            delta += now - last.get(p.pid, 0.0)
            last[p.pid] = now
        return delta

    def monitor() -> None:
        while True:
            time.sleep(interval)
            counter.inc(max(0.0, spent()))

    spent()  # what the processes spent starting is theirs too: counted at the first turn
    last.clear()
    thread = threading.Thread(target=monitor, name="sglang-tok cpu", daemon=True)
    thread.start()
    return thread


SGLANG_AFFINITY = "SGLANG_SET_CPU_AFFINITY"


def placement(server_args: Any, workers: int) -> list[int] | None:
    """The cores the service is pinned onto (None: unpinned), from the plugin's setting
    (`SGLANG_TOK_PIN`, read here, in SGLang's launcher process) and SGLang's own: with
    `SGLANG_SET_CPU_AFFINITY=1` the cores SGLang pins this server's schedulers to are
    not the service's (`cores.py` has the rule)."""
    import psutil

    from ...process import usable_cores
    from .cores import SETTING, choose, pin_setting, scheduler_cores, server_gpu_ids

    setting = pin_setting(os.environ.get(SETTING))
    reserved: set[int] = set()
    if setting is True and os.environ.get(SGLANG_AFFINITY, "").lower() in ("1", "true",
                                                                            "yes", "y"):
        tp, pp, nodes = (int(getattr(server_args, name, 1) or 1)
                         for name in ("tp_size", "pp_size", "nnodes"))
        gpus = server_gpu_ids(int(getattr(server_args, "base_gpu_id", 0) or 0),
                              int(getattr(server_args, "gpu_id_step", 1) or 1), tp, pp, nodes)
        reserved = scheduler_cores(gpus, tp // max(nodes // pp, 1),
                                   psutil.cpu_count(logical=False) or 0,
                                   psutil.cpu_count() or 0)
    cores, why = choose(setting, workers, int(getattr(server_args, "port", 0) or 0),
                        usable_cores(), reserved)
    log.info("sglang_tok: the service runs %s", why)
    return cores


# gpt-oss's <|call|>: SGLang's detokenizer keeps it when it stops a request
GPT_OSS_CALL = 200012


def kept_stop_ids(serving: Any) -> frozenset[int]:
    """The stop token ids SGLang's detokenizer leaves in the text for this server's tool
    parser (its `trim_matched_stop`): gpt-oss's call token, a response-template parser's
    one-token call closers."""
    parser = getattr(serving, "tool_call_parser", None)
    if not parser or getattr(serving, "skip_tokenizer_init", False):
        return frozenset()
    keep = {GPT_OSS_CALL} if parser == "gpt-oss" else set()
    try:
        from sglang.srt.parser.response_template import tool_close_token_ids
        from sglang.srt.utils.hf_transformers_utils import get_tokenizer

        keep |= tool_close_token_ids(parser, get_tokenizer(serving.tokenizer_path))
    except Exception:  # a parser SGLang cannot build here keeps nothing more
        log.warning("sglang_tok: no tool-call closers for parser %r", parser, exc_info=True)
    return frozenset(keep)
