"""Both ends of the service as a scheduler and a frontend see it: for tests, replay, demo.

`Frontend` binds the output PULL and gathers deltas per rid, checking the protocol's
ordering promises as they arrive (one shard per rid, per-process `seq` without gaps,
nothing after a request's last delta). `Scheduler` PUSHes frames into the input ring.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from . import protocol
from .protocol import Delta, Pong
from .ring.sockets import Curve, make_socket


@dataclass
class RequestOutput:
    rid: str
    shard: int
    deltas: list[Delta] = field(default_factory=list)
    finished: bool = False

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas)

    @property
    def ids(self) -> list[int]:
        return [i for d in self.deltas for i in d.ids]

    @property
    def last(self) -> Delta:
        return self.deltas[-1]


class Frontend:
    def __init__(self, endpoint: str, ctx: zmq.Context | None = None, hwm: int = 100000,
                 curve: Curve | None = None) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = make_socket(self.ctx, zmq.PULL, endpoint, bind=True, hwm=hwm, linger_ms=0,
                                curve=curve)
        self.requests: dict[str, RequestOutput] = {}
        self.pongs: list[Pong] = []
        self.seqs: dict[int, int] = {}
        self.violations: list[str] = []
        self.stale = 0  # deltas dropped because they came after their rid's terminal one
        self.messages = 0

    def poll(self, timeout_s: float) -> bool:
        """Take every message that arrives within timeout; True if any came."""
        got = False
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if not self.sock.poll(max(0, int(left * 1000)) if not got else 0):
                return got
            self.take(self.sock.recv())
            got = True

    def take(self, raw: bytes) -> None:
        msg = protocol.decode_output(raw)
        self.messages += 1
        if isinstance(msg, Pong):
            self.pongs.append(msg)
            return
        want = self.seqs.get(msg.shard, 0)
        if msg.seq != want:
            self.violations.append(f"process {msg.shard}: seq {msg.seq}, expected {want}")
        self.seqs[msg.shard] = msg.seq + 1
        for d in msg.deltas:
            self.add(msg.shard, d)

    def add(self, shard: int, d: Delta) -> None:
        req = self.requests.get(d.rid)
        if req is None:
            req = self.requests[d.rid] = RequestOutput(d.rid, shard)
        elif req.finished:  # protocol 5, rule 7: the first terminal delta ends a rid
            self.stale += 1
            return
        elif -1 not in (shard, req.shard) and shard != req.shard:
            self.violations.append(f"{d.rid}: deltas from shards {req.shard} and {shard}")
        req.deltas.append(d)
        if d.finish is not None:
            req.finished = True

    def wait_pongs(self, nonce: int, processes: set[int], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            got = {p.shard for p in self.pongs if p.nonce == nonce}
            if processes <= got:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.poll(min(left, 0.2))

    def close(self) -> None:
        self.sock.close(linger=0)


# one sequence for every Scheduler of this process: a frontend may hear several of them
_NONCES = itertools.count(1)


class Scheduler:
    def __init__(self, endpoint: str, ctx: zmq.Context | None = None, hwm: int = 1000,
                 sndtimeo_ms: int = -1, curve: Curve | None = None) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = make_socket(self.ctx, zmq.PUSH, endpoint, bind=False, hwm=hwm,
                                sndtimeo_ms=sndtimeo_ms, curve=curve)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def open(self, rid: str, **opts: Any) -> None:
        self.send(protocol.encode_control(protocol.Open(rid, **opts)))

    def ping(self) -> int:
        nonce = next(_NONCES)
        self.send(protocol.encode_control(protocol.Ping(nonce)))
        return nonce

    def close(self) -> None:
        self.sock.close(linger=1000)


def barrier(sched: Scheduler, front: Frontend, shards: int, timeout_s: float = 30.0) -> bool:
    """Wait until every delta of every frame sent so far has arrived (protocol PING)."""
    nonce = sched.ping()
    return front.wait_pongs(nonce, set(range(-1, shards)), timeout_s)
