"""The encode service's processes, as the supervisor runs them: the broker and its workers.

A module of its own (not the package's `__init__`), so that the broker and the worker,
which import the package's modules, never import their own package back."""


from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglang_tok.config import Config
from sglang_tok.process import Status, encode_slot

from . import cores
from .broker import main as broker_main
from .worker import main as worker_main

log = logging.getLogger("sglang_tok.encode")

# what the supervisor needs to run one child: role, status slot, target, its arguments
ChildSpec = tuple[str, int, Callable[..., None], tuple[Any, ...]]


def children(cfg: Config, status: Status, parent_pid: int) -> list[ChildSpec]:
    """The broker and the cfg.encode_workers workers; none when the service is off."""
    if not cfg.encode_workers:
        return []
    plan, why = cores.plan(cfg.shards, cfg.encode_workers, cfg.pin, cfg.pin_cores)
    if why:
        log.warning(why)
    broker = encode_slot(cfg.shards, 0)
    specs: list[ChildSpec] = [("encode-broker", broker, broker_main,
                               (cfg, status, broker, parent_pid))]
    for k in range(cfg.encode_workers):
        slot = encode_slot(cfg.shards, k + 1)
        args = (cfg, status, slot, k, plan[k], parent_pid)
        specs.append((f"encode-worker {k}", slot, worker_main, args))
    return specs

