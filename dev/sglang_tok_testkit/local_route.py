"""The egress's routing without its process, for tests and benchmarks that drive shard
tables in-process: the same Router, the same split of BATCH frames, the same control
routing (egress/control.py) and the shard's own control dispatch
(sglang_tok/protocols/model/dispatch.py), so a table sees what the running service would
deliver."""

from __future__ import annotations

from typing import Any

from egress.control import route_control
from egress.router import Router
from egress.split import split_frame
from ring import link
from sglang_tok.protocols.model import batch as native_batch
from sglang_tok.protocols.model import control, tags
from sglang_tok.protocols.model.dispatch import ControlDispatcher, table_handlers
from sglang_tok.protocols.model.interface import LATE


class LocalRoute:
    def __init__(self, nshards: int = 1) -> None:
        self.router = Router(nshards)

    def __call__(self, batch: native_batch.Batch, stamp: float = 0.0) -> dict[int, bytes]:
        router = self.router
        codes, _, _ = router.route(batch)
        new_rows, router.new_rows = router.new_rows, []
        router.opened = []
        if codes.count(LATE) == len(codes):
            return {}
        return dict(split_frame(stamp, batch, codes, router.nshards, new_rows))

    def open(self, rid: str) -> int:
        return self.router.open(rid)

    def end(self, rid: str) -> None:
        """ERROR, ABORT or DROP of a rid (the message then goes to its shard)."""
        self.router.end(rid)

    def self_ended(self, shard: int, rids: list[str]) -> None:
        self.router.self_ended(shard, rids)

    def feed(self, frame: bytes | memoryview, tables: Any, sinks: Any) -> None:
        """One input frame, any tag, through routing to the shards' tables (`tables[k]`,
        output into `sinks[k]`), as the egress and the shards' loops would do it."""
        if frame[0] == tags.TAG_BATCH:
            for k, msg in self(native_batch.decode_batch(frame)).items():
                parsed = link.parse(msg)
                assert isinstance(parsed, link.Arrays)
                tables[k].on_arrays(parsed, sinks[k])
        else:
            ctl = control.decode_control(frame)
            if not isinstance(ctl, control.Ping):
                for k, part, _ in route_control(self.router, ctl)[0]:
                    ControlDispatcher(table_handlers(tables[k]))(part, sinks[k])
        for k in range(self.router.nshards):
            if k < len(tables) and tables[k].self_ended:
                self.router.self_ended(k, tables[k].self_ended)
                tables[k].self_ended = []

