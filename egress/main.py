"""The egress process: drain the input ring, validate each frame whole, route rows to shards.

One loop, three inputs: the input ring (frames), the back channel (shard hellos, acks and
self-ended rids), and the supervisor's notices (a shard died, drain). Nothing waits on a
shard: every egress -> shard message (SYNC and START included) is queued per link and
pushed from the loop as the link accepts it. The only blocking sends, to the frontend and
the final EXITs, have deadlines; past one, the peer is treated as gone.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import zmq

from ring import link
from ring.sockets import PushTo, make_socket
from sglang_tok import security
from sglang_tok.config import Config, refusing
from sglang_tok.metrics import (
    DROP_REASONS,
    PUBLISH_EVERY_S,
    LocalCounter,
    LocalHistogram,
    Metrics,
)
from sglang_tok.process import (
    ACTIVITY_CELL,
    Beat,
    Status,
    freeze_heap,
    pin,
    setup_child,
    shards_text,
)
from sglang_tok.protocols.model import control, tags
from sglang_tok.protocols.model.control import Open, Pong
from sglang_tok.protocols.model.deltas import Delta, DeltasOut, Usage, terminal
from sglang_tok.protocols.model.errors import (
    EGRESS_RESTARTED,
    MALFORMED_FRAME,
    SHARD_RESTARTED,
    FrameError,
)
from sglang_tok.protocols.model.interface import (
    LATE,
    Control,
    Idle,
    Probe,
    Relay,
    Rows,
)
from sglang_tok.protocols.model.tags import EGRESS
from sglang_tok.protocols.registry import layout_of, protocol_of
from sglang_tok.tracefile import Recorder

from .control import Routed, route_control
from .inline import InlineShard
from .journal import FILENAME as JOURNAL
from .journal import Journal, replay
from .router import Endings, Live, Router, shard_of
from .split import split_frame

log = logging.getLogger("sglang_tok.egress")
POLL_MS = 100
SYNC_RETRY_S = 1.0  # a SYNC can vanish into the pipe of a shard that just died
# a dead shard's deltas already in the frontend's socket buffers may still be read after
# the egress's errors for its rids (two sockets have no common order); holding the errors
# this long lets the frontend read those first (docs/protocol.md section 5, rule 7)
STALE_HOLD_S = 0.25
# --protocol sglang: a request first seen mid-stream (the service started after it did)
LOST_START = "the detokenizer never received this request's first rows"


def main(cfg: Config, status: Status, core: int | None, restarted: bool = False) -> None:
    title = "sglang-tok egress"
    setup_child(title, cfg.log_level)
    pin(core, title)
    Egress(cfg, status, restarted).run()


def _recorder(cfg: Config) -> Recorder:
    meta: dict[str, Any] = {"protocol": cfg.protocol, "tokenizer": cfg.tokenizer,
                            "created": time.time(), "t0": time.time(),
                            "description": "recorded by sglang-tok serve --record"}
    if cfg.protocol == "sglang":  # the recording release's fields, to replay by name
        meta["sglang_layout"] = msgspec.to_builtins(layout_of(cfg))
    return Recorder(cfg.record, meta)


class Egress:
    def __init__(self, cfg: Config, status: Status, restarted: bool = False) -> None:
        self.cfg = cfg
        self.restarted = restarted
        self.grace_until = 0.0  # set once every shard has started again
        self.status = status
        # the activity counter is written straight to its cell, once per frame (a
        # replacement egress goes on from the count its predecessor reached)
        self.drained = status.activity
        self._cells = status.cells
        self.beat = Beat(status, 0)
        self.n = cfg.shards
        self.router = Router(cfg.shards, cfg.ended_memory * cfg.shards,
                             output_queue=cfg.link_capacity)
        # a replacement egress starts in quarantine: until --restart-grace after every
        # shard is back, rids it has never seen may be missing rows the old one lost
        self.router.quarantine = restarted and cfg.restart_grace > 0
        path = Path(cfg.runtime_dir, JOURNAL)
        # rids the dead egress's journal left open: each shard's SYNC answer ends those it
        # holds; the rest (a dead shard's, rows lost with the old egress) fail at its Hello
        self.replayed = replay(path) if restarted else {}
        self.journal = Journal(path, self.replayed)
        self.metrics = Metrics()
        self.reader, self.writer = protocol_of(cfg).egress(cfg)
        self.workers = self.writer.workers
        if self.replayed and self.workers is not None:  # where a dead egress's errors go
            self.workers.note(list(self.replayed), list(self.replayed.values()))
        self.inline: InlineShard | None = None
        self.recorder = _recorder(cfg) if cfg.record else None
        self._sockets(cfg)
        self.token = os.getpid()  # tells our SYNC's answers from a dead egress's
        self.sync_msg = link.sync(self.token)
        self.pids: list[int | None] = [None] * self.n
        self.up = [False] * self.n
        self.synced = [False] * self.n
        self.sync_sent = [0.0] * self.n
        # SYNC goes first on every link: rows queued behind it wait for the shard's START
        self.pending: list[deque[bytes]] = [deque([self.sync_msg]) for _ in range(self.n)]
        self.held: deque[tuple[float, list[Delta]]] = deque()  # errors waiting STALE_HOLD_S
        self.draining = False
        self.drain_deadline = 0.0
        self.out_lost = 0  # egress messages dropped because the frontend stopped reading
        # per-frame metrics counted here, flushed to the shared files by `_publish`
        self.iteration = LocalHistogram(self.metrics.iteration.labels(cfg.model_name,
                                                                      cfg.engine))
        self.frames = {tag: LocalCounter(self.metrics.frames.labels(name))
                       for tag, name in tags.INPUT_TAGS.items()}
        self._next_publish = 0.0
        for reason in DROP_REASONS:
            self.metrics.dropped.labels(reason)
        self.late = self.metrics.late_rows.labels("-1")
        self.idle: dict[str, LocalCounter] = {}  # frames with nothing to route, by what

    def _sockets(self, cfg: Config) -> None:
        self.ctx = zmq.Context(io_threads=1)
        hwm = cfg.link_capacity
        ring_curve = out_curve = None
        if cfg.curve_keys:
            self.auth = security.authenticator(self.ctx, cfg.curve_keys, security.SCHEDULERS)
            ring_curve = security.service_server(cfg.curve_keys)
            out_curve = security.service_client(cfg.curve_keys)
        with refusing("input", cfg.input):
            self.ring = make_socket(self.ctx, zmq.PULL, cfg.input, bind=True,
                                    hwm=cfg.ring_capacity, max_msg_bytes=cfg.max_frame_bytes,
                                    linger_ms=0, curve=ring_curve)
        self.links: list[Any] = []
        if cfg.inline_shard:  # the one shard lives here (egress/inline.py)
            self.inline = InlineShard(cfg, self.status, 0, self.ctx, os.getppid(),
                                      self.restarted, self.metrics)
            self.links.append(self.inline)
        else:
            self.links = [make_socket(self.ctx, zmq.PUSH, cfg.ipc(f"shard-{k}.ipc"),
                                      bind=True, hwm=hwm) for k in range(self.n)]
        self.back = make_socket(self.ctx, zmq.PULL, cfg.ipc("back.ipc"), bind=True, hwm=hwm)
        self.notices = make_socket(self.ctx, zmq.PULL, cfg.ipc("egress-ctl.ipc"), bind=True,
                                   hwm=hwm)
        self.out = make_socket(self.ctx, zmq.PUSH, cfg.output, bind=False, hwm=hwm,
                               curve=out_curve)
        self.outs = PushTo(self.ctx, self.out, hwm)
        self.health = make_socket(self.ctx, zmq.PUSH, cfg.ipc("health.ipc"), bind=False,
                                  hwm=64, linger_ms=0)

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        log.info("egress routing to %s; input ring %s", shards_text(self.n), self.cfg.input)
        freeze_heap()
        if self.restarted:
            # the frontend ends every request in flight: rows of some may have died unread
            # in the old egress's sockets, and only the frontend knows those rids
            for to, msg in self.writer.restarted(EGRESS, os.getpid()):
                self._send_out(msg, to=to)
        poller = zmq.Poller()
        poller.register(self.back, zmq.POLLIN)
        poller.register(self.notices, zmq.POLLIN)
        shard_links = [] if self.inline is not None else self.links
        while not self.draining:
            self.beat()
            self._tick()
            self._serve_inline()
            for k, sock in enumerate(shard_links):
                poller.register(sock, zmq.POLLOUT if self._sendable(k) else 0)
            # while a shard's queue is full, leave frames in the ring: backpressure
            poller.register(self.ring, 0 if self._ring_blocked() else zmq.POLLIN)
            events = dict(poller.poll(POLL_MS))
            if self.notices in events or self.back in events:
                self._serve_notices()
            if self.ring in events and not self.draining:
                self._drain_ring(limit=256)
                self._serve_inline()
        self._shutdown()

    def _tick(self) -> None:
        """Timed work: held errors whose time came, SYNCs to retry, every link's queue,
        metrics (an inline shard's too)."""
        now = time.monotonic()
        if now >= self._next_publish:
            self._publish()
        if self.inline is not None:
            self.inline.tick()
        while self.held and self.held[0][0] <= now:
            self._send_failures(self.held.popleft()[1])
        for k in range(self.n):
            q = self.pending[k]
            unsent = bool(q) and q[0] is self.sync_msg
            if not self.synced[k] and not unsent and now - self.sync_sent[k] > SYNC_RETRY_S:
                q.appendleft(self.sync_msg)
            self._flush(k)

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
        self.drained += 1
        self._cells[ACTIVITY_CELL] = self.drained
        if self.recorder is not None:
            self.recorder.write(time.time(), frame)
        if not len(frame):
            return self._drop(FrameError("empty", "zero-length frame"))
        try:
            event = self.reader.read(frame, self.router.where, self.router.ended)
        except FrameError as err:
            return self._drop(err)
        match event:
            case Rows():
                self.frames[event.tag].inc()
                try:  # (the rows' route written out here: a call per frame is 1% of it)
                    if event.ends or event.lost:
                        self._end_first(event.ends, event.lost)
                    opens = self._first_opens(event.opens) if event.opens else None
                    if event.fresh and self.router.quarantine:
                        for rid in event.fresh:  # a first row is no suspect
                            self.router.open(rid)
                    self._route_batch(event, stamp, opens)
                except Exception:  # a bug costs these rows' requests, told; never the ring
                    log.exception("internal error routing a frame's rows; dropping it")
                    self._drop(FrameError("internal", "internal error", event.batch.rids))
            case Control(msg=msg, tag=tag):
                self.frames[tag].inc()
                fwd = link.forward(stamp, frame)
                if isinstance(msg, Open):
                    self._route_open(msg, fwd)
                else:
                    self._route_control(msg, fwd, stamp)
            case Probe(nonce=nonce, counted=counted):
                if counted:
                    self.frames[tags.TAG_PING].inc()
                self._ping(nonce, link.forward(stamp, frame))
            case Relay(parts=parts):
                for to, part in parts:
                    self._send_out(part, to=to)
            case Idle(what=what):
                counter = self.idle.get(what)
                if counter is None:
                    counter = self.idle[what] = LocalCounter(self.metrics.frames.labels(what))
                counter.inc()

    def _end_first(self, ends: Sequence[tuple[str, str]], lost: Sequence[str]) -> None:
        """What the reader says must end before a frame's rows route: the requests it
        refused, and those first seen mid-stream (their rows route as late)."""
        by_reason: dict[str, list[str]] = {}
        for rid, why in ends:
            by_reason.setdefault(why, []).append(rid)
        if lost:  # their rows route as late: no text without its start
            by_reason.setdefault(EGRESS_RESTARTED if self.restarted else LOST_START,
                                 []).extend(lost)
        for why, rids in by_reason.items():
            self._end_on_shards(rids, why)

    def _first_opens(self, opens: Sequence[Open]) -> dict[int, list[Open]]:
        """First rows' options, by shard: they ride in the shard's ARRAYS message, ahead
        of its rows (`Sparse.opens`), so a new request costs no message of its own."""
        rids = [o.rid for o in opens]
        for rid in rids:  # a reused rid: the old one was ended for its scheduler
            self.replayed.pop(rid, None)
        self._journal_opened(rids)
        by_shard: dict[int, list[Open]] = {}
        for o in opens:
            by_shard.setdefault(self.router.open(o.rid), []).append(o)
        return by_shard

    def _forward(self, k: int, msg: bytes, ended: Endings | None = None) -> None:
        """Queue a message for shard k; `ended` rids end when the shard acknowledges it."""
        self.router.dispatched(k, ended)
        self.pending[k].append(msg)
        self._flush(k)

    def _route_open(self, msg: Open, fwd: bytes) -> None:
        rid = msg.rid
        self.replayed.pop(rid, None)  # a reused rid: the old one was ended for its scheduler
        self.journal.write(opened=(rid,))
        self._route_control(msg, fwd, 0.0)

    def _route_control(self, msg: Routed, fwd: bytes, stamp: float) -> None:
        """OPEN, ERROR, ABORT, RESULT to their shards (egress/control.py); the frame goes
        as it came unless a shard gets a part of it (an ABORT of several shards' rids)."""
        routes, late = route_control(self.router, msg)
        if late:
            self.late.inc(late)
        for k, part, ended in routes:
            frame = fwd if part is msg else link.forward(stamp, control.encode_control(part))
            self._forward(k, frame, ended)

    def _route_batch(self, event: Rows, stamp: float,
                     opens: dict[int, list[Open]] | None = None) -> None:
        router = self.router
        batch = event.batch
        if router.quarantine and self.grace_until and time.monotonic() > self.grace_until:
            router.quarantine = False
        owner, tokens, finished = router.route(batch, event.codes, event.finished)
        if router.opened:  # before any row of theirs can reach a shard
            if self.replayed:
                for rid in router.opened:
                    self.replayed.pop(rid, None)
            self._journal_opened(router.opened)
            router.opened = []
        if router.suspects:
            self._fail_suspects()
        if len(batch):
            self.iteration.observe(tokens)
        late = owner.count(LATE)
        if late:
            self.late.inc(late)
        new_rows, router.new_rows = router.new_rows, []
        if late == len(owner):
            return
        for k, msg in split_frame(stamp, batch, owner, self.n, new_rows, event.carry, opens,
                                  self.inline is not None):
            self._forward(k, msg, finished.get(k))

    def _journal_opened(self, rids: list[str]) -> None:
        self.journal.write(opened=rids, workers=self._workers_of(rids))

    def _fail_suspects(self) -> None:
        """Rids first seen just after this egress replaced a dead one: their earlier rows
        may have died with it, so they end with an error rather than continue with the
        start of their text missing. Their shard decides: a rid it already ended stays
        quiet, any other gets the terminal error."""
        suspects, self.router.suspects = self.router.suspects, []
        for rid in suspects:
            self.replayed.pop(rid, None)
        self._end_on_shards(suspects, EGRESS_RESTARTED)

    def _end_on_shards(self, rids: list[str], message: str) -> None:
        """Have each rid's shard end it with `message`, after the rid's earlier deltas.

        Journaled until the shard acknowledges the DROP: a DROP that dies in this egress's
        queue is redone by the next one (a rid its shard never saw gets no other error).
        """
        self._journal_opened(rids)
        by_shard: dict[int, Endings] = {}
        for rid in rids:
            k = self.router.owner(rid)
            by_shard.setdefault(k, []).append((rid, self.router.end(rid) or Live(k)))
        for k, ended in by_shard.items():
            rids = [rid for rid, _ in ended]
            self._forward(k, link.drop(message, rids, self._workers_of(rids)), ended)

    def _workers_of(self, rids: list[str]) -> list[str | None]:
        return [] if self.workers is None else self.workers.of(rids)

    def _publish(self) -> None:
        """The per-frame metrics to the shared files: a few times a second, before a
        barrier's PONG and at exit, rather than a locked file write per frame."""
        self._next_publish = time.monotonic() + PUBLISH_EVERY_S
        self.iteration.flush()
        for counter in (*self.frames.values(), *self.idle.values()):
            counter.flush()
        if self.recorder is not None:
            self.recorder.flush()

    def _ping(self, nonce: int, fwd: bytes) -> None:
        if nonce >= 0:  # a barrier: every frame before it shows in /metrics
            self._publish()
        self._send_out(control.encode_pong(Pong(nonce, EGRESS)), probe=nonce < 0)
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
        self.metrics.terminal_errors.labels("malformed_frame").inc(len(rids))
        self._end_on_shards(rids, MALFORMED_FRAME)

    # ------------------------------------------------------------------ notices
    def _serve_inline(self) -> None:
        """What an inline shard said since the last turn (its Hello, Acks, EndedNotice)."""
        if self.inline is None:
            return
        queue = self.inline.notices.queue
        while queue:
            self.on_notice(link.notice_decoder.decode(queue.popleft()))

    def _serve_notices(self) -> None:
        for sock in (self.notices, self.back):
            while True:
                try:
                    raw = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.on_notice(link.notice_decoder.decode(raw))

    def on_notice(self, note: link.Notice) -> None:
        match note:
            case link.Ack(shard=k, token=token, pid=pid) if (token == self.token
                                                             and pid == self.pids[k]):
                self._acked(note)  # else from before our SYNC, or a dead incarnation's
            case link.EndedNotice(shard=k, rids=rids):
                self.router.self_ended(k, rids)
                for rid in rids:
                    self.replayed.pop(rid, None)
                # journaled as ended; their workers stay until the shard's next ACK: a shard
                # that dies first fails them again (its output may not have left it)
                self.journal.write(ended=(r for r in rids if r not in self.router.live))
            case link.Hello(token=token) if token == self.token:
                self._on_hello(note)
            case link.ShardDown(shard=k, pid=pid) if pid == self.pids[k]:
                # else an incarnation that never answered our SYNC: it held nothing of ours
                self._fail_shard(k)
                self.pids[k] = None
                self.up[k] = self.synced[k] = False
                self.pending[k].append(self.sync_msg)  # to whoever connects next
                self.status.egress_ready = False
            case link.Drain(deadline=deadline):
                self.draining = True
                self.drain_deadline = deadline

    def _acked(self, ack: link.Ack) -> None:
        """The shard processed messages up to `count`: the rids they ended are done."""
        done = self.router.acked(ack.shard, ack.count, ack.sent, ack.usage)
        live = self.router.live
        if done:
            self.journal.write(ended=(rid for rid in done if rid not in live))
        gone = self.router.ledgers[ack.shard].take_gone()
        if gone and self.workers is not None:
            # their last deltas have left the shard: no error of theirs can follow
            self.workers.ended([rid for rid in gone if rid not in live])

    def _on_hello(self, note: link.Hello) -> None:
        """A shard answered our SYNC: START it ahead of what waits for it."""
        k = note.shard
        if self.synced[k] and self.pids[k] == note.pid:
            return  # the answer to a repeated SYNC; this incarnation is started already
        if self.pids[k] is not None and self.pids[k] != note.pid:
            self._fail_shard(k)  # its death's notice is still on its way
        self.pids[k] = note.pid
        self.up[k] = self.synced[k] = True
        q = self.pending[k]
        while self.sync_msg in q:  # not sent yet, and START must be the last word
            q.remove(self.sync_msg)
        q.appendleft(link.START)
        self._flush(k)
        self._fail_replayed(k)
        log.info("shard %d (pid %d) started", k, note.pid)
        if all(self.up):
            self.status.egress_ready = True
            if self.restarted and not self.grace_until:
                self.grace_until = time.monotonic() + self.cfg.restart_grace

    def _fail_replayed(self, k: int) -> None:
        """Rids the dead egress left open on shard k that the shard did not hold (its
        answer to SYNC ended those it held): a dead shard's, or rows lost in the ring."""
        if not self.replayed:
            return
        mine = [rid for rid in self.replayed if shard_of(rid, self.n) == k]
        for rid in mine:
            del self.replayed[rid]
        if mine:
            log.warning("failing %d requests the previous egress left open on shard %d",
                        len(mine), k)
            self.metrics.terminal_errors.labels("egress_restarted").inc(len(mine))
            zero = Usage(0, 0, 0, 0, 0)
            self._send_failures([terminal(rid, EGRESS_RESTARTED, zero) for rid in mine])

    def _fail_shard(self, k: int) -> None:
        deltas = self.router.fail_shard(k, SHARD_RESTARTED)
        self.pending[k].clear()  # rows for rids just failed
        log.warning("shard %d is gone: failing its %d unfinished requests", k, len(deltas))
        self.metrics.terminal_errors.labels("shard_restarted").inc(len(deltas))
        if deltas:
            self.held.append((time.monotonic() + STALE_HOLD_S, deltas))

    # ------------------------------------------------------------------ sends
    def _sendable(self, k: int) -> bool:
        q = self.pending[k]
        return bool(q) and (self.up[k] or q[0] is self.sync_msg)

    def _flush(self, k: int) -> None:
        """Push shard k's queue in order while its link takes it; only SYNC goes to a
        shard that is not up. While a queue holds --link-capacity messages the ring is
        not read, so waiting on a shard becomes backpressure on the scheduler."""
        q, sock = self.pending[k], self.links[k]
        while q and (self.up[k] or q[0] is self.sync_msg):
            try:
                sock.send(q[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            if q.popleft() is self.sync_msg:
                self.sync_sent[k] = time.monotonic()

    def _send_failures(self, deltas: list[Delta]) -> None:
        """The egress's own terminal errors; a rid reopened since keeps its new life."""
        live = self.router.live
        deltas = [d for d in deltas if d.rid not in live]
        if not deltas:
            return
        for to, msg in self.writer.messages(DeltasOut(deltas), b"", EGRESS):
            self._send_out(msg, to=to)
        self.journal.write(ended=(d.rid for d in deltas))

    def _send_out(self, msg: bytes, probe: bool = False, to: str | None = None) -> None:
        """To the frontend, within --heartbeat-timeout: a frontend that reads nothing for
        that long is treated as gone and the message is dropped, so that the loop goes on
        (the drain, shard deaths) instead of spinning while looking alive."""
        if probe:
            try:
                self.health.send(msg, zmq.NOBLOCK)
            except zmq.Again:
                pass
            return
        deadline = time.monotonic() + self.cfg.heartbeat_timeout
        sock = self.outs[to]
        while True:
            try:
                sock.send(msg, zmq.NOBLOCK)
                return
            except zmq.Again:
                if time.monotonic() >= deadline:
                    break
                self.beat()
                if self.notices.poll(10):
                    self._serve_notices()
        self.out_lost += 1
        log.error("the frontend read nothing for %.1fs: dropped an egress message (%d so "
                  "far)", self.cfg.heartbeat_timeout, self.out_lost)

    # ------------------------------------------------------------------ shutdown
    def _shutdown(self) -> None:
        """Drain what the ring already accepted, tell every shard to finish, close; all by
        the deadline the supervisor put in the Drain (a shard still taking nothing then is
        treated as gone: the supervisor kills what did not exit)."""
        deadline = self.drain_deadline or time.monotonic() + self.cfg.drain_timeout
        self._drain_ring(limit=1 << 30)
        self.ring.close(linger=0)
        self._publish()
        while self.held:
            self._send_failures(self.held.popleft()[1])
        for k in range(self.n):
            if self.up[k]:
                self.pending[k].append(link.EXIT)
        waiting = [k for k in range(self.n) if self.up[k]]
        while waiting and time.monotonic() < deadline:
            for k in waiting:
                self._flush(k)
            self.beat()
            self._serve_inline()
            waiting = [k for k in waiting if self.up[k] and self.pending[k]]
            if waiting and self.back.poll(20):
                self._serve_notices()
        stuck = [k for k in range(self.n) if self.up[k] and self.pending[k]]
        log.info("egress drained%s; exiting",
                 f" (shards {stuck} took nothing by the deadline)" if stuck else "")
        self.journal.close()
        if self.recorder is not None:
            self.recorder.close()
        linger = max(0, int(1000 * (deadline - time.monotonic())))
        self.outs.close(linger)
        for sock in (*self.links, self.back, self.notices, self.out, self.health):
            sock.close(linger=linger)
        if self.cfg.curve_keys:
            self.auth.stop()
        self.ctx.term()
