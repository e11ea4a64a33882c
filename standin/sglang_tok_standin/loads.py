"""What the stand-in tells the rest of SGLang besides its messages: its load, written where
SGLang's DP controller and TokenizerManager read each rank's (`load_snapshot`, 0.5.23's
shared-memory slots: `--load-balance-method total_requests` balances by them), and a
shutdown passed on to the other ranks of the server.

SGLang sends ShutdownReq to the ranks it reaches (with DP attention, every tp_size-th) and
its rank 0 passes it on over torch.distributed, which the stand-in does not have: the rank
told signals its sibling stand-ins (same parent, same process title) with SIGUSR1, and each
stops at its next poll, as the real ranks stop together.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any, Protocol

log = logging.getLogger("sglang_tok.standin")
TITLE = "sglang::scheduler (sglang-tok stand-in)"


class Counts(Protocol):
    """What a snapshot reads of the stand-in's steps (`core.Core`)."""

    running: list[Any]
    max_running: int

    @property
    def waiting(self) -> Any: ...


def snapshot_fields(core: Counts, dp_rank: int, max_total_tokens: int) -> dict[str, Any]:
    """A rank's load as SGLang's `LoadSnapshot` names it (the core section: what DP
    balancing reads), stamped now: a reader skips a snapshot whose timestamp it has seen."""
    return {"timestamp": time.time(), "dp_rank": dp_rank,
            "num_running_reqs": len(core.running), "num_waiting_reqs": len(core.waiting),
            "max_total_num_tokens": max_total_tokens,
            "max_running_requests": core.max_running}


class LoadWriter:
    """SGLang's own snapshot writer for this rank, where the release has one (0.5.23);
    elsewhere, or where it fails to open, nothing is written (as SGLang's scheduler only
    warns)."""

    def __init__(self, port_args: Any, release: Any) -> None:
        self.dp_rank = int(getattr(release, "dp_rank", 0) or 0)
        self.max_total = int(getattr(release, "max_total_tokens", 1 << 24))
        self.writer: Any = None
        self.snapshot: Any = None
        try:
            from sglang.srt.managers.load_snapshot import (
                LoadSnapshot,
                create_load_snapshot_writer,
            )
        except ImportError:
            return
        try:
            self.writer = create_load_snapshot_writer(port_args, _dp_ranks(release),
                                                      self.dp_rank, publish_interval=1)
            self.snapshot = LoadSnapshot
        except Exception as exc:  # SGLang's scheduler goes on without one too
            log.warning("stand-in: no load snapshot writer (%s)", exc)

    def write(self, core: Counts) -> None:
        if self.writer is None:
            return
        try:
            self.writer.write(self.snapshot(**snapshot_fields(core, self.dp_rank,
                                                               self.max_total)))
        except Exception as exc:
            log.warning("stand-in: load snapshot not written (%s)", exc)
            self.writer = None


def _dp_ranks(release: Any) -> int:
    """The server's DP ranks, as the scheduler's `get_parallel().num_dp_ranks` says."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().num_dp_ranks)
    except Exception:
        return int(getattr(release, "dp_size", 1) or 1)


def peers(pid: int | None = None) -> list[int]:
    """The other stand-in ranks of this server: the same parent's children that carry the
    stand-in's process title."""
    import psutil

    me = psutil.Process(pid or os.getpid())
    parent = me.parent()
    if parent is None:
        return []
    found = []
    for child in parent.children():
        try:
            if child.pid != me.pid and TITLE in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            pass
    return found


def stop_peers() -> None:
    for pid in peers():
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass


__all__ = ["TITLE", "LoadWriter", "peers", "snapshot_fields", "stop_peers"]
