"""A decoder shard: pinned to its core, sole owner of its rid table, one DELTAS per message."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Protocol

import msgspec
import zmq

from ring import link
from ring.sockets import PushTo, make_socket
from sglang_tok import security
from sglang_tok.config import Config
from sglang_tok.metrics import PUBLISH_EVERY_S, LocalHistogram, Metrics
from sglang_tok.process import Beat, Status, freeze_heap, parent_alive, pin, setup_child
from sglang_tok.protocols.model import control, errors, output
from sglang_tok.protocols.model.control import Ping, Pong
from sglang_tok.protocols.model.deltas import DeltasOut
from sglang_tok.protocols.model.dispatch import ControlDispatcher, rids_of, table_handlers
from sglang_tok.protocols.registry import protocol_of
from sglang_tok.tokenizer import load

from .decoders import family_of
from .messages.table import RidTable

log = logging.getLogger("sglang_tok.shard")
POLL_MS = 100
# acks to the egress and counter updates: at most this often while messages come, and on
# the first quiet turn after. An ack only lets the egress forget endings (the ledger a
# shard's death is failed from); acking each message of a scheduler stepping every 20 ms
# woke the egress a second time per message
REPORT_EVERY_S = 0.05


def main(cfg: Config, status: Status, shard: int, core: int | None, parent_pid: int,
         restarted: bool = False) -> None:
    title = f"sglang-tok shard {shard}"
    setup_child(title, cfg.log_level)
    pin(core, title)
    # one core per shard: keep the tokenizer's own thread pool off
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    info = load(cfg.tokenizer)
    log.info("%s loaded tokenizer %s (%s decoder)", title, cfg.tokenizer, family_of(info))
    Shard(cfg, status, shard, info, parent_pid, restarted).run()


class Back(Protocol):
    """Where a shard's notices to the egress go: its back socket, or (a shard inside the
    egress's process) the egress's own queue."""

    def send(self, data: bytes, flags: int = 0) -> Any: ...


class Shard:
    """`inbox`/`back` None: the shard's own sockets (a process of its own); given, it
    lives inside the egress's process, which calls `handle` and reads its notices
    (egress/inline.py)."""

    def __init__(self, cfg: Config, status: Status, shard: int, info: Any,
                 parent_pid: int, restarted: bool = False, ctx: zmq.Context | None = None,
                 back: Back | None = None, metrics: Metrics | None = None) -> None:
        self.shard = shard
        self.parent_pid = parent_pid
        self.beat = Beat(status, 1 + shard)
        self.table = RidTable(info, shard, cfg.max_requests, cfg.ended_memory,
                              max_stops=cfg.max_stops, max_stop_len=cfg.max_stop_length,
                              max_tools_bytes=cfg.max_tools_bytes)
        # OPEN, ERROR, ABORT, RESULT: each to its table handler (a PING is ours: `on_frame`).
        # No handler of ours in it: a shard holding its own bound method would be a cycle,
        # and a shard dropped unclosed would be left to the cyclic GC, where zmq's Context
        # finalizer hangs on sockets the GC has not closed yet
        self.control = ControlDispatcher(table_handlers(self.table))
        self.own_ctx = ctx is None
        self.ctx = zmq.Context(io_threads=1) if ctx is None else ctx
        hwm = cfg.link_capacity
        self.inbox = make_socket(self.ctx, zmq.PULL, cfg.ipc(f"shard-{shard}.ipc"), bind=False,
                                 hwm=hwm) if back is None else None
        curve = security.service_client(cfg.curve_keys) if cfg.curve_keys else None
        self.out = make_socket(self.ctx, zmq.PUSH, cfg.output, bind=False, hwm=hwm, curve=curve)
        self.outs = PushTo(self.ctx, self.out, hwm)
        self.writer = protocol_of(cfg).shard(cfg, info)
        self.back: Back = back if back is not None else make_socket(
            self.ctx, zmq.PUSH, cfg.ipc("back.ipc"), bind=False, hwm=hwm)
        self.health = make_socket(self.ctx, zmq.PUSH, cfg.ipc("health.ipc"), bind=False,
                                  hwm=64, linger_ms=0)
        self.pid = os.getpid()
        if restarted:
            for to, msg in self.writer.restarted(shard, self.pid):
                self.outs[to].send(msg)
        self.started = False
        self.token = 0  # of the egress whose SYNC we answered last
        self.processed = 0  # FORWARD and DROP messages since START, acked to the egress
        self._next_report = self._next_publish = 0.0
        self._acked = 0  # `processed` when the last Ack went
        m = metrics if metrics is not None else Metrics()  # one set per process
        label = str(shard)
        self.m_rows, self.m_tokens = m.rows.labels(label), m.tokens.labels(label)
        self.m_late = m.late_rows.labels(label)
        self.m_ignored = m.ignored_opens.labels(label)
        self.m_rejected = m.rejected.labels(label)
        self.m_live = m.live.labels(label)
        self.m_decode = LocalHistogram(m.decode_seconds.labels(label))
        self.m_latency = LocalHistogram(m.frame_latency)
        self._last = msgspec.structs.asdict(self.table.counters)
        self.m_paths = m.paths
        self._paths_sent: dict[str, int] = {}

    def run(self) -> None:
        freeze_heap()
        inbox = self.inbox
        assert inbox is not None  # a shard of its own
        while True:
            self.beat()
            if not inbox.poll(POLL_MS):
                self.idle()
                if not parent_alive(self.parent_pid):
                    log.warning("supervisor is gone; exiting")
                    return
                continue
            if not self.handle(inbox.recv()):
                break
        self._publish()
        self.close()

    def handle(self, raw: bytes | link.Arrays) -> bool:
        """One message from the egress (an Arrays object from an egress it lives in);
        False once it says EXIT."""
        match link.parse(raw):
            case link.Arrays() | link.Frame() as msg:
                if self.started:  # else it was routed before our SYNC: the egress failed it
                    self._guarded(msg)
            case link.Drop(message=message, rids=rids, workers=workers):
                if workers and self.writer.workers is not None:  # where the rows it ends go
                    self.writer.workers.note(rids, workers)
                out = DeltasOut()
                self.table.on_drop(rids, message, out)
                self._send(out)
                if self.started:
                    self._processed()
            case link.Start():
                if not self.started:  # a repeated START (our second Hello) changes nothing
                    self.started = True
                    self.processed = self._acked = 0
            case link.Sync(token=token):
                self._sync(token)
            case link.Exit():
                log.info("drained; exiting")
                return False
        return True

    def _guarded(self, msg: link.Arrays | link.Frame) -> None:
        try:
            self.on_frame(msg)
        except Exception:  # a bug costs this message's requests, not the shard
            log.exception("internal error on a message")
            self._fail_message(msg)
        self._processed()

    def _processed(self) -> None:
        """Count a message toward the egress's ledger; ack and publish at most every
        REPORT_EVERY_S (a quiet turn acks the rest: `idle`)."""
        self.processed += 1
        now = time.monotonic()
        if now >= self._next_report:
            self._report(now)

    def _report(self, now: float) -> None:
        self._ack()
        self._acked = self.processed
        self._next_report = now + REPORT_EVERY_S
        if now >= self._next_publish:
            self._publish()

    def _ack(self) -> None:
        table = self.table
        ack = link.Ack(self.shard, self.processed, self.writer.sent, self.token, self.pid,
                       table.final_usage)
        table.final_usage = []
        self.back.send(link.notice_encoder.encode(ack))

    def _sync(self, token: int) -> None:
        """An egress that does not know our live rids (a new one, or one that thought us
        dead): end them now (`_send` tells it which, as `EndedNotice`), then say Hello."""
        out = DeltasOut()
        self.table.fail_all(errors.EGRESS_RESTARTED, out)
        self._send(out)
        self.table.final_usage = []  # a new egress has no endings of ours to settle
        self.started = False
        self.token = token
        hello = link.Hello(self.shard, os.getpid(), token)
        self.back.send(link.notice_encoder.encode(hello))

    def on_frame(self, msg: link.Arrays | link.Frame) -> None:
        t0 = time.perf_counter()
        out = self.writer.sink()
        table = self.table
        extra = b""
        if isinstance(msg, link.Arrays):
            if msg.sparse.opens:  # first rows' options, as OPENs before the rows
                opened = self.writer.sink()
                for opts in msg.sparse.opens:
                    table.on_open(opts, opened)
                self._send(opened)
            table.on_arrays(msg, out)
            extra = msg.carried if msg.carried is not None else msg.sparse.extra
        else:
            ctl = control.decode_control(msg.frame)
            if isinstance(ctl, Ping):  # no request's: answered here, no deltas, no decode time
                if ctl.nonce >= 0:  # a barrier: what came before it shows in /metrics
                    self._publish()
                return self._pong(ctl.nonce)
            self.control(ctl, out)
        self._send(out, extra)
        self.m_decode.observe(time.perf_counter() - t0)
        self.m_latency.observe(time.monotonic() - msg.stamp)

    def _pong(self, nonce: int) -> None:
        """After every earlier message's deltas; a probe's (nonce < 0) goes to /health."""
        pong = control.encode_pong(Pong(nonce, self.shard))
        if nonce >= 0:
            self.out.send(pong)
            return
        try:
            self.health.send(pong, zmq.NOBLOCK)
        except zmq.Again:
            pass

    def _fail_message(self, msg: link.Arrays | link.Frame) -> None:
        """End every rid a message named, after an internal error processing it: a rid left
        in a half-updated state, or never opened, would otherwise wait forever."""
        try:
            rids = self._rids_of(msg)
        except Exception:  # the frame decoded once already; this is belt and braces
            log.exception("cannot read the rids of the failed message")
            rids = []
        out = DeltasOut()
        self.table.on_drop(list(dict.fromkeys(rids)), "internal detokenizer error", out)
        self._send(out)

    def _rids_of(self, msg: link.Arrays | link.Frame) -> list[str]:
        """The rids this shard owns in a message (a RESULT or PING holds no request state)."""
        if isinstance(msg, link.Arrays):
            state = self.table.state
            held = [state.rids[s] for s in msg.slots.tolist() if s < state.capacity]
            return [rid for _, rid, _, _ in msg.sparse.new] + [r for r in held if r]
        return rids_of(control.decode_control(msg.frame))

    def _send(self, out: output.Sink, extra: Any = b"") -> None:
        if not out:
            return
        for to, msg in self.writer.messages(out, extra, self.shard):
            self.outs[to].send(msg)
        if self.table.self_ended:
            ended = link.EndedNotice(self.shard, self.table.self_ended)
            self.back.send(link.notice_encoder.encode(ended))
            self.table.self_ended = []

    def idle(self) -> None:
        """A quiet turn of the loop it lives in: what was not acked yet, when due;
        counters out, when due."""
        now = time.monotonic()
        if self.started and self.processed != self._acked and now >= self._next_report:
            self._report(now)
        elif now >= self._next_publish:
            self._publish()

    def _publish(self) -> None:
        """Counters to Prometheus, as differences since the last publish."""
        self._next_publish = time.monotonic() + PUBLISH_EVERY_S
        self.m_decode.flush()
        self.m_latency.flush()
        now = msgspec.structs.asdict(self.table.counters)
        last = self._last
        for name, metric in (("rows", self.m_rows), ("tokens", self.m_tokens),
                             ("late_rows", self.m_late), ("ignored_opens", self.m_ignored),
                             ("rejected", self.m_rejected)):
            if now[name] != last[name]:
                metric.inc(now[name] - last[name])
        self._last = now
        self.m_live.set(len(self.table.by_rid) + len(self.table.opened))
        sent = self._paths_sent
        for path, count in self.table.paths.items():
            if count != sent.get(path, 0):
                self.m_paths.labels(str(self.shard), path).inc(count - sent.get(path, 0))
                sent[path] = count

    def close(self, linger: int | None = None) -> None:
        self.outs.close(linger)
        for sock in (self.inbox, self.back, self.health, self.out):
            if isinstance(sock, zmq.Socket):
                sock.close(linger)
        if self.own_ctx:
            self.ctx.term()
