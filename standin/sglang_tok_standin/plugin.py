"""The stand-in scheduler's SGLang entry point (`sglang_tok_standin`): with
`SGLANG_TOK_STANDIN` set, SGLang's launcher starts the stand-in (`main.py`) where it would
start its scheduler, through an AROUND hook on `Engine._launch_scheduler_processes` that
hands SGLang's own launch step our process function; without it, the entry point does
nothing. It does not need sglang-tok's detokenizer plugin: with
`SGLANG_PLUGINS=sglang_tok_standin` SGLang's own detokenizer serves the stand-in.

Importing this module imports nothing of SGLang; only `register` and the hook do.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from typing import Any

from .config import ENV, StandinConfig, parse

log = logging.getLogger("sglang_tok.standin")
TARGET = "sglang.srt.entrypoints.engine.Engine._launch_scheduler_processes"


def register() -> None:
    """SGLang's entry point: inert unless SGLANG_TOK_STANDIN says how it runs
    (config.py)."""
    text = os.environ.get(ENV)
    if not text:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    cfg = parse(text)
    HookRegistry.register(TARGET, functools.partial(launch_scheduler, cfg), HookType.AROUND)


def launch_scheduler(cfg: StandinConfig, original: Any, cls: Any, server_args: Any,
                     port_args: Any, run_scheduler_process_func: Any = None,
                     *args: Any, **kwargs: Any) -> Any:
    """`Engine._launch_scheduler_processes` with the stand-in as the process function:
    SGLang's launcher starts it, hands it the pipe, waits for its ready message, and
    watches it as it would watch its scheduler. The stand-in is told the parameter names
    of the function it stands in for (the release's own `run_scheduler_process`): each
    release passes its own ranks, in its own order."""
    from .main import run_standin

    log.info("sglang_tok: the scheduler is sglang-tok's stand-in (%s)", cfg)
    return original(cls, server_args, port_args,
                    functools.partial(run_standin, cfg, params_of(run_scheduler_process_func)),
                    *args, **kwargs)


def params_of(func: Any) -> tuple[str, ...]:
    """The positional parameter names of the scheduler's process function (SGLang's own
    `run_scheduler_process` when the launcher is handed none)."""
    if func is None:
        from sglang.srt.managers import scheduler

        func = scheduler.run_scheduler_process
    if isinstance(func, functools.partial):  # a partial's own arguments come first
        return params_of(func.func)[len(func.args):]
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
