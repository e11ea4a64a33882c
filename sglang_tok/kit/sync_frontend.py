"""The synchronous frontend of tests and scripts: `Frontend` binds the output PULL, gathers
every delta of every rid and checks the protocol's ordering promises as they arrive (one
shard per rid, per-process `seq` without gaps); `barrier` (PING/PONG) and `ready` (every
process's output reaches it) drive it with a `Scheduler`. It reads frames with the kit's
`decode_frame`, as the asyncio `Client` does (sglang_tok/kit/).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import zmq

from ring.sockets import BoundFile, make_socket
from sglang_tok.kit.frames import decode_frame
from sglang_tok.kit.scheduler import Scheduler
from sglang_tok.protocols.model import deltas as native_deltas
from sglang_tok.protocols.model import errors
from sglang_tok.protocols.model.control import Pong, Restarted
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.protocols.model.tags import EGRESS
from sglang_tok.security import Curve

__all__ = ["Frontend", "RequestOutput", "barrier", "ready"]

NO_SHARD = -2  # a registered request no process has answered yet


@dataclass
class RequestOutput:
    rid: str
    shard: int
    deltas: list[Delta] = field(default_factory=list)
    finished: bool = False
    by_frontend: bool = False  # its terminal delta is the frontend's (an egress RESTARTED)
    late_finish: Delta | None = None  # the first terminal delta that came after that

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas)

    @property
    def ids(self) -> list[int]:
        return [i for d in self.deltas for i in d.ids]

    @property
    def last(self) -> Delta:
        return self.deltas[-1]

    @property
    def service_end(self) -> Delta | None:
        """The service's own terminal delta, also when the frontend had ended the request
        first (tests check what the service does apart from the frontend's rule)."""
        if self.by_frontend:
            return self.late_finish
        return self.deltas[-1] if self.finished else None


class Frontend:
    """Synchronous: binds the output PULL, keeps every delta of every rid (tests, scripts).

    `register(rid)` a request before its first frame is sent, so that an egress restart
    can end it even if the service never saw it (protocol section 5.3).
    """

    def __init__(self, endpoint: str, ctx: zmq.Context | None = None, hwm: int = 100000,
                 curve: Curve | None = None, bind: bool = True) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = make_socket(self.ctx, zmq.PULL, endpoint, bind=bind, hwm=hwm, linger_ms=0,
                                curve=curve)
        self._file = BoundFile(endpoint if bind else "")
        self.requests: dict[str, RequestOutput] = {}
        self.pongs: list[Pong] = []
        self.seqs: dict[int, int] = {}
        self.violations: list[str] = []
        self.late = 0  # deltas after a rid's last one: dropped (protocol section 5)
        self.late_terminal = 0  # of them, second terminal deltas (section 5, rule 7)
        self.messages = 0
        self.restarts: list[Restarted] = []
        self.ended_by_restart = 0  # requests this frontend ended on the egress's RESTARTED

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
        msg = decode_frame(raw)
        self.messages += 1
        if isinstance(msg, Pong):
            self.pongs.append(msg)
            return
        if isinstance(msg, Restarted):
            return self.restarted(msg)
        shard, seq, deltas = msg
        want = self.seqs.get(shard, 0)
        if seq != want:
            self.violations.append(f"process {shard}: seq {seq}, expected {want}")
        self.seqs[shard] = seq + 1
        for d in deltas:
            self.add(shard, d)

    def register(self, rid: str) -> RequestOutput:
        """A request about to be sent (again, for a reused rid): it is now in flight."""
        req = self.requests[rid] = RequestOutput(rid, NO_SHARD)
        return req

    def restarted(self, msg: Restarted) -> None:
        """A replaced process counts its `seq` from 0; a replaced egress ends every
        request in flight, including those whose every row died unseen in the old one."""
        self.restarts.append(msg)
        self.seqs[msg.shard] = 0
        if msg.shard != EGRESS:
            return
        zero = native_deltas.Usage(0, 0, 0, 0, 0)
        for req in self.requests.values():
            if not req.finished:
                self.ended_by_restart += 1
                self.add(EGRESS, native_deltas.terminal(req.rid, errors.EGRESS_RESTARTED, zero))
                req.by_frontend = True

    def add(self, shard: int, d: Delta) -> None:
        req = self.requests.get(d.rid)
        if req is None:
            req = self.requests[d.rid] = RequestOutput(d.rid, shard)
        elif req.shard == NO_SHARD:
            req.shard = shard
        elif req.finished:
            self.late += 1
            if d.finish is not None:
                self.late_terminal += 1
                if req.late_finish is None:
                    req.late_finish = d
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
                self.pongs = [p for p in self.pongs if p.nonce != nonce]
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.poll(min(left, 0.2))

    def close(self) -> None:
        self.sock.close(linger=0)
        self._file.remove()


def barrier(sched: Scheduler, front: Frontend, shards: int, timeout_s: float = 30.0) -> bool:
    """Wait until every delta of every frame sent so far has arrived (protocol PING)."""
    nonce = sched.ping()
    return front.wait_pongs(nonce, set(range(-1, shards)), timeout_s)


def ready(sched: Scheduler, front: Frontend, shards: int, timeout_s: float = 30.0,
          every_s: float = 0.1) -> bool:
    """`Client.ready` for `Frontend`: PING until some PONG has come from every process."""
    want = set(range(-1, shards))
    nonces: set[int] = set()
    now = time.monotonic()
    deadline, next_ping = now + timeout_s, now
    while True:
        if time.monotonic() >= next_ping:
            nonces.add(sched.ping())
            next_ping = time.monotonic() + every_s
        front.poll(max(0.0, min(next_ping, deadline) - time.monotonic()))
        if want <= {p.shard for p in front.pongs if p.nonce in nonces}:
            front.pongs = [p for p in front.pongs if p.nonce not in nonces]
            return True
        if time.monotonic() >= deadline:
            return False
