"""Where a control message goes: the router's part of OPEN, ERROR, ABORT and RESULT.

The egress and the in-process harness (dev/sglang_tok_testkit/local_route.py) both route
control messages through `route_control`, so a harness-driven table sees exactly what the
running service would deliver: an ERROR or ABORT of an ended rid is late and goes nowhere,
an ABORT is split into one per shard.
"""

from __future__ import annotations

from typing import NamedTuple

from sglang_tok.protocols.model.control import Abort, Error, Open, Result
from sglang_tok.protocols.model.interface import Routed

from .router import Endings, Live, Router


class Route(NamedTuple):
    """One shard's part: `msg` is the frame's own message (`is` the one routed: forward
    the frame as it came) or a new one; `ended` rids end when the shard acknowledges it."""

    shard: int
    msg: Routed
    ended: Endings | None


def route_control(router: Router, msg: Routed) -> tuple[list[Route], int]:
    """The shards' parts of a control message, and how many of its rids were late."""
    match msg:
        case Open(rid=rid):
            return [Route(router.open(rid), msg, None)], 0
        case Error(rid=rid):
            if router.is_ended(rid):
                return [], 1
            k = router.owner(rid)
            st = router.end(rid)
            return [Route(k, msg, [(rid, st)] if st is not None else None)], 0
        case Result(rid=rid):
            return [Route(router.owner(rid), msg, None)], 0
        case Abort(rids=rids):
            return _abort(router, rids)
    raise TypeError(f"not a routed control message: {type(msg).__name__}")


def _abort(router: Router, rids: list[str]) -> tuple[list[Route], int]:
    by_shard: dict[int, Endings] = {}
    late = 0
    for rid in dict.fromkeys(rids):
        if router.is_ended(rid):
            late += 1
            continue
        k = router.owner(rid)
        st = router.end(rid) or Live(k)
        by_shard.setdefault(k, []).append((rid, st))
    return [Route(k, Abort([rid for rid, _ in ended]), ended)
            for k, ended in by_shard.items()], late
