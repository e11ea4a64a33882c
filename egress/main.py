"""The egress process: drain the input ring, validate each frame whole, route rows to shards.

One loop, three inputs: the input ring (frames), the back channel (shard hellos and
self-ended rids), and the supervisor's notices (a shard died, drain). Sends never block
the loop blind: a full link is retried while notices are still served, so a shard's death
is handled even while the egress waits on that shard.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import msgspec
import zmq
from sglang_tok.ring import link
from sglang_tok.ring.sockets import make_socket

from sglang_tok import protocol, security
from sglang_tok.config import Config
from sglang_tok.metrics import DROP_REASONS, Metrics
from sglang_tok.process import ACTIVITY, EGRESS_READY, Beat, pin, setup_child
from sglang_tok.protocol import (
    EGRESS_RESTARTED,
    MALFORMED_FRAME,
    SHARD_RESTARTED,
    Abort,
    Delta,
    Error,
    FrameError,
    Open,
    Ping,
    Pong,
    Result,
)

from .router import Ended, Live, Router

log = logging.getLogger("sglang_tok.egress")
POLL_MS = 100
EGRESS = -1


def main(cfg: Config, status: Any, core: int | None, restarted: bool = False) -> None:
    title = "sglang-tok egress"
    setup_child(title, cfg.log_level)
    pin(core, title)
    Egress(cfg, status, restarted).run()


class Egress:
    def __init__(self, cfg: Config, status: Any, restarted: bool = False) -> None:
        self.cfg = cfg
        self.restarted = restarted
        self.grace_until = 0.0  # set once every shard has started again
        self.status = status
        self.beat = Beat(status, 0)
        self.n = cfg.shards
        self.router = Router(cfg.shards, cfg.ended_memory * cfg.shards)
        # a replacement egress starts in quarantine: until --restart-grace after every
        # shard is back, rids it has never seen may be missing rows the old one lost
        self.router.quarantine = restarted and cfg.restart_grace > 0
        self.metrics = Metrics()
        self.ctx = zmq.Context(io_threads=1)
        hwm = cfg.link_capacity
        ring_curve = out_curve = None
        if cfg.curve_keys:
            self.auth = security.authenticator(self.ctx, cfg.curve_keys, security.SCHEDULERS)
            ring_curve = security.service_server(cfg.curve_keys)
            out_curve = security.service_client(cfg.curve_keys)
        self.ring = make_socket(self.ctx, zmq.PULL, cfg.input, bind=True, hwm=cfg.ring_capacity,
                                max_msg_bytes=cfg.max_frame_bytes, linger_ms=0,
                                curve=ring_curve)
        self.links = [make_socket(self.ctx, zmq.PUSH, cfg.ipc(f"shard-{k}.ipc"), bind=True,
                                  hwm=hwm) for k in range(self.n)]
        self.back = make_socket(self.ctx, zmq.PULL, cfg.ipc("back.ipc"), bind=True, hwm=hwm)
        self.notices = make_socket(self.ctx, zmq.PULL, cfg.ipc("egress-ctl.ipc"), bind=True,
                                   hwm=hwm)
        self.out = make_socket(self.ctx, zmq.PUSH, cfg.output, bind=False, hwm=hwm,
                               curve=out_curve)
        self.health = make_socket(self.ctx, zmq.PUSH, cfg.ipc("health.ipc"), bind=False,
                                  hwm=64, linger_ms=0)
        self.pids: list[int | None] = [None] * self.n
        self.up = [False] * self.n
        self.pending: list[deque[bytes]] = [deque() for _ in range(self.n)]
        self.seq = 0
        self.draining = False
        self.iteration = self.metrics.iteration.labels(cfg.model_name, cfg.engine)
        self.frames = {tag: self.metrics.frames.labels(name)
                       for tag, name in protocol.INPUT_TAGS.items()}
        for reason in DROP_REASONS:
            self.metrics.dropped.labels(reason)
        self.late = self.metrics.late_rows.labels("-1")

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        # SYNC goes first on every link, before any START: a START that overtook it would
        # be undone by it, and rows sent in between would be discarded by the shard
        for k in range(self.n):
            while True:
                try:
                    self.links[k].send(link.SYNC, zmq.NOBLOCK)
                    break
                except zmq.Again:  # shard k has not connected yet
                    self.beat()
                    time.sleep(0.01)
        log.info("egress ready to route to %d shards; input ring %s", self.n, self.cfg.input)
        poller = zmq.Poller()
        poller.register(self.back, zmq.POLLIN)
        poller.register(self.notices, zmq.POLLIN)
        while not self.draining:
            self.beat()
            for k in range(self.n):
                self._flush(k)
                held = bool(self.pending[k]) and self.up[k]
                poller.register(self.links[k], zmq.POLLOUT if held else 0)
            # while a shard's queue is full, leave frames in the ring: backpressure
            poller.register(self.ring, 0 if self._ring_blocked() else zmq.POLLIN)
            events = dict(poller.poll(POLL_MS))
            if self.notices in events or self.back in events:
                self._serve_notices()
            if self.ring in events and not self.draining:
                self._drain_ring(limit=256)
        self._shutdown()

    def _ring_blocked(self) -> bool:
        cap = self.cfg.link_capacity
        return any(len(p) >= cap for p in self.pending)

    def _drain_ring(self, limit: int) -> None:
        for _ in range(limit):
            try:
                frame = self.ring.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self.on_frame(memoryview(frame))
            except Exception:  # a bug must cost one frame, never the ring
                log.exception("internal error on a frame; dropping it")
                self.metrics.dropped.labels("internal").inc()
            self.beat()

    # ------------------------------------------------------------------ frames
    def on_frame(self, frame: memoryview) -> None:
        stamp = time.monotonic()
        self.status[ACTIVITY] += 1
        if not len(frame):
            return self._drop(FrameError("empty", "zero-length frame"))
        tag = frame[0]
        counter = self.frames.get(tag)
        if tag == protocol.TAG_BATCH:
            try:
                batch = protocol.decode_batch(frame, self.cfg.max_rid_length,
                                              self.cfg.max_row_ids)
            except FrameError as err:
                return self._drop(err)
            counter.inc()  # type: ignore[union-attr]
            return self._route_batch(batch, frame, stamp)
        try:
            msg = protocol.decode_control(frame)
        except FrameError as err:
            return self._drop(err)
        counter.inc()  # type: ignore[union-attr]
        fwd = link.forward(stamp, frame)
        if isinstance(msg, Open):
            if len(msg.rid) > self.cfg.max_rid_length:
                return self._drop(FrameError("limit_rid_length", "rid longer than "
                                             f"--max-rid-length {self.cfg.max_rid_length}"))
            self._forward(self.router.open(msg.rid), fwd)
        elif isinstance(msg, Error):
            if self.router.is_ended(msg.rid):
                self.late.inc()
                return
            k = self.router.owner(msg.rid)
            st = self.router.end(msg.rid)
            self._forward(k, fwd, [(msg.rid, st)] if st is not None else None)
        elif isinstance(msg, Result):
            self._forward(self.router.owner(msg.rid), fwd)
        elif isinstance(msg, Abort):
            self._route_abort(msg, stamp)
        elif isinstance(msg, Ping):
            self._ping(msg, fwd)

    def _forward(self, k: int, msg: bytes, ended: Ended | None = None) -> None:
        self.router.dispatched(k, ended)
        self._send_link(k, msg)

    def _route_batch(self, batch: protocol.Batch, frame: memoryview, stamp: float) -> None:
        if self.router.quarantine and self.grace_until and time.monotonic() > self.grace_until:
            self.router.quarantine = False
        owner, tokens, finished = self.router.route(batch)
        if self.router.suspects:
            self._fail_suspects()
        if len(batch):
            self.iteration.observe(tokens)
        late = owner.count(link.LATE)
        if late:
            self.late.inc(late)
        if self.n == 1 and not late:
            if owner:
                self._forward(0, link.forward(stamp, frame), finished.get(0))
            return
        owners = bytes(owner)
        msg = link.rows(stamp, owners, frame)
        for k in set(owner):
            if k != link.LATE:
                self._forward(k, msg, finished.get(k))

    def _fail_suspects(self) -> None:
        """Rids first seen just after this egress replaced a dead one: their earlier rows
        may have died with it, so they end with an error rather than continue with the
        start of their text missing. Their shard decides: a rid it already ended stays
        quiet, any other gets the terminal error."""
        by_shard: dict[int, list[str]] = {}
        for rid in self.router.suspects:
            by_shard.setdefault(self.router.owner(rid), []).append(rid)
            self.router.end(rid)
        self.router.suspects = []
        for k, rids in by_shard.items():
            self._send_link(k, link.DROP + msgspec.msgpack.encode((EGRESS_RESTARTED, rids)))

    def _route_abort(self, msg: Abort, stamp: float) -> None:
        by_shard: dict[int, Ended] = {}
        for rid in dict.fromkeys(msg.rids):
            if self.router.is_ended(rid):
                self.late.inc()
                continue
            k = self.router.owner(rid)
            st = self.router.end(rid) or Live(k)
            by_shard.setdefault(k, []).append((rid, st))
        for k, ended in by_shard.items():
            frame = protocol.encode_control(Abort([rid for rid, _ in ended]))
            self._forward(k, link.forward(stamp, frame), ended)

    def _ping(self, msg: Ping, fwd: bytes) -> None:
        self._send_out(protocol.encode_pong(Pong(msg.nonce, EGRESS)), probe=msg.nonce < 0)
        for k in range(self.n):
            self._forward(k, fwd)

    def _drop(self, err: FrameError) -> None:
        """Drop a frame whole: count it and have each named rid's shard fail it.

        The owning shard sends the terminal error so that it follows the rid's earlier
        deltas on the same socket; the egress only forgets the rid.
        """
        self.metrics.dropped.labels(err.reason).inc()
        rids = [r for r in dict.fromkeys(err.rids) if not self.router.is_ended(r)]
        log.warning("dropped frame (%s): %s; failing %d rids", err.reason, err.detail[:200],
                    len(rids))
        by_shard: dict[int, list[str]] = {}
        for rid in rids:
            by_shard.setdefault(self.router.owner(rid), []).append(rid)
            self.router.end(rid)
        self.metrics.terminal_errors.labels("malformed_frame").inc(len(rids))
        for k, ks in by_shard.items():
            self._send_link(k, link.DROP + msgspec.msgpack.encode((MALFORMED_FRAME, ks)))

    # ------------------------------------------------------------------ notices
    def _serve_notices(self) -> None:
        for sock in (self.notices, self.back):
            while True:
                try:
                    raw = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.on_notice(link.notice_decoder.decode(raw))

    def on_notice(self, note: link.Notice) -> None:
        if isinstance(note, link.Ack):
            self.router.acked(note.shard, note.count)
        elif isinstance(note, link.Ended):
            for rid in note.rids:
                self.router.end(rid)
        elif isinstance(note, link.Hello):
            k = note.shard
            if self.pids[k] is not None and self.pids[k] != note.pid:
                self._fail_shard(k)
            self.pids[k] = note.pid
            self.up[k] = True
            self._send_now(k, link.START)
            self._flush(k)
            log.info("shard %d (pid %d) started", k, note.pid)
            if all(self.up):
                self.status[EGRESS_READY] = 1.0
                if self.restarted and not self.grace_until:
                    self.grace_until = time.monotonic() + self.cfg.restart_grace
        elif isinstance(note, link.ShardDown):
            k = note.shard
            if self.pids[k] != note.pid:
                return  # an older incarnation; the Hello of the new one already failed it
            self._fail_shard(k)
            self.pids[k] = None
            self.up[k] = False
            self.status[EGRESS_READY] = 0.0
        elif isinstance(note, link.Drain):
            self.draining = True

    def _fail_shard(self, k: int) -> None:
        deltas = self.router.fail_shard(k, SHARD_RESTARTED)
        self.pending[k].clear()  # rows for rids just failed
        log.warning("shard %d is gone: failing its %d unfinished requests", k, len(deltas))
        self.metrics.terminal_errors.labels("shard_restarted").inc(len(deltas))
        self._send_deltas(deltas)

    # ------------------------------------------------------------------ sends
    def _send_link(self, k: int, msg: bytes) -> None:
        """Queue a message for shard k behind what is already held, then push what fits.

        Each link delivers in call order. While shard k is down or its link is full,
        messages wait in `pending[k]`; the ring is not read while any such queue holds
        --link-capacity messages, so waiting becomes backpressure on the scheduler.
        """
        self.pending[k].append(msg)
        self._flush(k)

    def _flush(self, k: int) -> None:
        q, link = self.pending[k], self.links[k]
        while q and self.up[k]:
            try:
                link.send(q[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            q.popleft()

    def _send_now(self, k: int, msg: bytes) -> None:
        """START and EXIT: straight onto the link (START goes ahead of held data, which
        was routed for the incarnation it starts), serving notices while it is full."""
        while True:
            try:
                self.links[k].send(msg, zmq.NOBLOCK)
                return
            except zmq.Again:
                self.beat()
                if self.back.poll(10) or self.notices.poll(0):
                    self._serve_notices()

    def _send_deltas(self, deltas: list[Delta]) -> None:
        msg = protocol.encode_output(self.cfg.output_format, EGRESS, self.seq, deltas)
        self.seq += 1
        self._send_out(msg)

    def _send_out(self, msg: bytes, probe: bool = False) -> None:
        if probe:
            try:
                self.health.send(msg, zmq.NOBLOCK)
            except zmq.Again:
                pass
            return
        while True:
            try:
                self.out.send(msg, zmq.NOBLOCK)
                return
            except zmq.Again:
                self.beat()
                if self.notices.poll(10):
                    self._serve_notices()

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> None:
        """Drain what the ring already accepted, tell every shard to finish, close."""
        self.draining = True
        self._drain_ring(limit=1 << 30)
        self.ring.close(linger=0)
        deadline = time.monotonic() + self.cfg.drain_timeout
        for k in range(self.n):
            while self.up[k] and self.pending[k] and time.monotonic() < deadline:
                self._flush(k)
                if self.pending[k]:
                    self.links[k].poll(50, zmq.POLLOUT)
                    self.beat()
            if self.up[k]:
                self._send_now(k, link.EXIT)
        log.info("egress drained; exiting")
        for sock in (*self.links, self.back, self.notices, self.out, self.health):
            sock.close()
        if self.cfg.curve_keys:
            self.auth.stop()
        self.ctx.term()
