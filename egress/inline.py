"""A shard inside the egress's own process (`--inline-shard`, with `--shards 1`).

With one shard, every message crosses two processes: the egress reads it, then wakes the
shard, which wakes the egress again with its acknowledgement. Inside SGLang, where the
scheduler sends a message of a few hundred rows every step, those wakeups and the link's
copy of each message cost the service more than its decoding (each process pays for a
cold start per message). Here the shard is an object of the egress: the link to it is a
call to `Shard.handle` with the same link message, and its notices (Hello, Ack, EndedNotice)
queue up for the egress's loop, so everything else (SYNC and START, the ledger of
endings, PINGs, drains) is the same code as with shards of their own. The shard's slot
in the status block beats with the egress's loop; the two live and die together.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import zmq

from sglang_tok.config import Config
from sglang_tok.metrics import Metrics
from sglang_tok.process import Status
from sglang_tok.tokenizer import load
from shards.main import Shard


class Notices:
    """The shard's back channel: what it sends waits here for the egress's loop."""

    def __init__(self) -> None:
        self.queue: deque[bytes] = deque()

    def send(self, data: bytes, flags: int = 0) -> None:
        self.queue.append(data)


class InlineShard:
    """Shard `k` as the egress's link to it: `send` hands it a link message."""

    def __init__(self, cfg: Config, status: Status, k: int, ctx: zmq.Context[Any],
                 parent_pid: int, restarted: bool, metrics: Metrics) -> None:
        self.notices = Notices()
        self.shard = Shard(cfg, status, k, load(cfg.tokenizer), parent_pid, restarted,
                           ctx=ctx, back=self.notices, metrics=metrics)
        status.set_pid(1 + k, os.getpid())

    def send(self, msg: bytes, flags: int = 0) -> None:
        self.shard.handle(msg)

    def tick(self) -> None:
        """The shard's own loop's duties on the egress's loop turn."""
        self.shard.beat()
        self.shard.idle()

    def close(self, linger: int | None = None) -> None:
        self.shard.close(linger)
