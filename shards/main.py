"""A decoder shard: pinned to its core, sole owner of its rid table, one DELTAS per message."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec
import zmq
from sglang_tok.ring import link
from sglang_tok.ring.sockets import PushTo, make_socket

from sglang_tok import protocol, security
from sglang_tok.config import Config
from sglang_tok.integrations.sglang.reply import Replies
from sglang_tok.metrics import PUBLISH_EVERY_S, LocalHistogram, Metrics
from sglang_tok.process import Beat, Status, freeze_heap, parent_alive, pin, setup_child
from sglang_tok.protocol import Abort, Delta, Error, Open, Ping, Pong, Restarted, Result
from sglang_tok.tokenizer import load

from .messages.table import RidTable

log = logging.getLogger("sglang_tok.shard")
POLL_MS = 100
# acks to the egress and counter updates: when the inbox runs dry, else at this interval
REPORT_EVERY_S = 0.005


def main(cfg: Config, status: Status, shard: int, core: int | None, parent_pid: int,
         restarted: bool = False) -> None:
    title = f"sglang-tok shard {shard}"
    setup_child(title, cfg.log_level)
    pin(core, title)
    # one core per shard: keep the tokenizer's own thread pool off
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    info = load(cfg.tokenizer)
    log.info("%s loaded tokenizer %s (%s path)", title, cfg.tokenizer,
             "byte-table" if info.byte_table is not None else "window")
    Shard(cfg, status, shard, info, parent_pid, restarted).run()


class Shard:
    def __init__(self, cfg: Config, status: Status, shard: int, info: Any,
                 parent_pid: int, restarted: bool = False) -> None:
        self.output_format = cfg.output_format
        self.shard = shard
        self.parent_pid = parent_pid
        self.beat = Beat(status, 1 + shard)
        self.table = RidTable(info, shard, cfg.max_requests, cfg.ended_memory,
                              max_stops=cfg.max_stops, max_stop_len=cfg.max_stop_length,
                              max_tools_bytes=cfg.max_tools_bytes)
        self.ctx = zmq.Context(io_threads=1)
        hwm = cfg.link_capacity
        self.inbox = make_socket(self.ctx, zmq.PULL, cfg.ipc(f"shard-{shard}.ipc"), bind=False,
                                 hwm=hwm)
        curve = security.service_client(cfg.curve_keys) if cfg.curve_keys else None
        self.out = make_socket(self.ctx, zmq.PUSH, cfg.output, bind=False, hwm=hwm, curve=curve)
        self.outs = PushTo(self.ctx, self.out, hwm)
        # --protocol sglang: BatchStrOutput replies, to the TokenizerManager or its workers
        self.sglang = Replies(cfg.sglang_tokenizer_workers > 1) \
            if cfg.protocol == "sglang" else None
        if self.sglang is not None:  # the replies take the decoders' texts as they are
            self.output_format = "columnar"
        self.back = make_socket(self.ctx, zmq.PUSH, cfg.ipc("back.ipc"), bind=False, hwm=hwm)
        self.health = make_socket(self.ctx, zmq.PUSH, cfg.ipc("health.ipc"), bind=False,
                                  hwm=64, linger_ms=0)
        self.seq = 0
        self.pid = os.getpid()
        if restarted and self.sglang is None:  # our seq starts again from 0 (section 5.3)
            self.out.send(protocol.encode_restarted(Restarted(shard, os.getpid())))
        self.started = False
        self.token = 0  # of the egress whose SYNC we answered last
        self.processed = 0  # FORWARD and DROP messages since START, acked to the egress
        self._next_report = self._next_publish = 0.0
        m = Metrics()
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
        while True:
            self.beat()
            if not inbox.poll(POLL_MS):
                self._publish()
                if not parent_alive(self.parent_pid):
                    log.warning("supervisor is gone; exiting")
                    return
                continue
            if not self.handle(inbox.recv()):
                break
        self._publish()
        self.close()

    def handle(self, raw: bytes) -> bool:
        """One message from the egress; False once it says EXIT."""
        match link.parse(raw):
            case link.Arrays() | link.Frame() as msg:
                if self.started:  # else it was routed before our SYNC: the egress failed it
                    self._guarded(msg)
            case link.Drop(message=message, rids=rids, workers=workers):
                if self.sglang is not None:  # the rows it ends go to these workers
                    for rid, ipc in zip(rids, workers):
                        if ipc is not None:
                            self.sglang.ipc_of[rid] = ipc
                out: list[Delta] = []
                self.table.on_drop(rids, message, out)
                self._send(out)
                if self.started:
                    self._processed()
            case link.Start():
                if not self.started:  # a repeated START (our second Hello) changes nothing
                    self.started = True
                    self.processed = 0
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
        """Count a message toward the egress's ledger; ack and publish when the inbox runs
        dry, else at most every REPORT_EVERY_S."""
        self.processed += 1
        now = time.monotonic()
        if now >= self._next_report or not self.inbox.poll(0):
            self._ack()
            self._next_report = now + REPORT_EVERY_S
            if now >= self._next_publish:
                self._publish()

    def _ack(self) -> None:
        table = self.table
        ack = link.Ack(self.shard, self.processed, self.seq, self.token, self.pid,
                       table.final_usage)
        table.final_usage = []
        self.back.send(link.notice_encoder.encode(ack))

    def _sync(self, token: int) -> None:
        """An egress that does not know our live rids (a new one, or one that thought us
        dead): end them now (`_send` tells it which, as `Ended`), then say Hello."""
        out: list[Delta] = []
        self.table.fail_all(protocol.EGRESS_RESTARTED, out)
        self._send(out)
        self.table.final_usage = []  # a new egress has no endings of ours to settle
        self.started = False
        self.token = token
        hello = link.Hello(self.shard, os.getpid(), token)
        self.back.send(link.notice_encoder.encode(hello))

    def on_frame(self, msg: link.Arrays | link.Frame) -> None:
        t0 = time.perf_counter()
        out = protocol.output_sink(self.output_format)
        table = self.table
        extra = b""
        if isinstance(msg, link.Arrays):
            if msg.sparse.opens:  # first rows' options, as OPENs before the rows
                opened = protocol.output_sink(self.output_format)
                for opts in msg.sparse.opens:
                    table.on_open(opts, opened)
                self._send(opened)
            table.on_arrays(msg, out)
            extra = msg.sparse.extra
        else:
            match protocol.decode_control(msg.frame):
                case Open() as ctl:
                    table.on_open(ctl, out)
                case Error() as ctl:
                    table.on_error(ctl, out)
                case Abort() as ctl:
                    table.on_abort(ctl, out)
                case Result() as ctl:
                    table.on_result(ctl, out)
                case Ping(nonce=nonce):
                    if nonce >= 0:  # a barrier: what came before it shows in /metrics
                        self._publish()
                    return self._pong(nonce)
        self._send(out, extra)
        self.m_decode.observe(time.perf_counter() - t0)
        self.m_latency.observe(time.monotonic() - msg.stamp)

    def _pong(self, nonce: int) -> None:
        """After every earlier message's deltas; a probe's (nonce < 0) goes to /health."""
        pong = protocol.encode_pong(Pong(nonce, self.shard))
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
        out: list[Delta] = []
        self.table.on_drop(list(dict.fromkeys(rids)), "internal detokenizer error", out)
        self._send(out)

    def _rids_of(self, msg: link.Arrays | link.Frame) -> list[str]:
        """The rids this shard owns in a message (a RESULT or PING holds no request state)."""
        if isinstance(msg, link.Arrays):
            state = self.table.state
            held = [state.rids[s] for s in msg.slots.tolist() if s < state.capacity]
            return [rid for _, rid, _, _ in msg.sparse.new] + [r for r in held if r]
        match protocol.decode_control(msg.frame):
            case Open(rid=rid) | Error(rid=rid):
                return [rid]
            case Abort(rids=rids):
                return rids
        return []

    def _send(self, out: protocol.Sink, extra: bytes = b"") -> None:
        if not out:
            return
        if self.sglang is None:
            self.out.send(protocol.encode_output(self.output_format, self.shard, self.seq, out))
            self.seq += 1
        else:
            self._send_sglang(out, extra)
        if self.table.self_ended:
            ended = link.Ended(self.shard, self.table.self_ended)
            self.back.send(link.notice_encoder.encode(ended))
            self.table.self_ended = []

    def _send_sglang(self, out: protocol.Sink, extra: bytes) -> None:
        """A message's rows as SGLang replies: decoded rows joined to what the scheduler
        passed on (`extra`), or, without it, the service's own last rows."""
        assert self.sglang is not None
        if extra:
            assert isinstance(out, protocol.ColumnsOut)
            replies = self.sglang.rows(out, extra)
        else:
            deltas = out.build(self.shard, self.seq).deltas \
                if isinstance(out, protocol.ColumnsOut) else out
            replies = self.sglang.last_rows(deltas)
        for to, reply in replies:
            self.outs[to].send(reply)
            self.seq += 1

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

    def close(self) -> None:
        self.outs.close()
        for sock in (self.inbox, self.back, self.health, self.out):
            sock.close()
        self.ctx.term()
