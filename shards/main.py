"""A decoder shard: pinned to its core, sole owner of its rid table, one DELTAS per message."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec
import zmq
from sglang_tok.ring import link
from sglang_tok.ring.sockets import make_socket

from sglang_tok import protocol, security
from sglang_tok.config import Config
from sglang_tok.metrics import Metrics
from sglang_tok.process import Beat, parent_alive, pin, setup_child
from sglang_tok.protocol import Abort, Delta, Error, Open, Ping, Pong, Result
from sglang_tok.tokenizer import load

from .table import RidTable

log = logging.getLogger("sglang_tok.shard")
POLL_MS = 100
# acks to the egress and counter updates: when the inbox runs dry, else at this interval
REPORT_EVERY_S = 0.005


def main(cfg: Config, status: Any, shard: int, core: int | None, parent_pid: int) -> None:
    title = f"sglang-tok shard {shard}"
    setup_child(title, cfg.log_level)
    pin(core, title)
    # one core per shard: keep the tokenizer's own thread pool off
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    info = load(cfg.tokenizer)
    log.info("%s loaded tokenizer %s (%s path)", title, cfg.tokenizer,
             "byte-table" if info.byte_table is not None else "window")
    Shard(cfg, status, shard, info, parent_pid).run()


class Shard:
    def __init__(self, cfg: Config, status: Any, shard: int, info: Any, parent_pid: int) -> None:
        self.cfg = cfg
        self.shard = shard
        self.parent_pid = parent_pid
        self.beat = Beat(status, 1 + shard)
        self.table = RidTable(info, shard, cfg.max_requests, cfg.ended_memory,
                              max_stops=cfg.max_stops, max_stop_len=cfg.max_stop_length)
        self.ctx = zmq.Context(io_threads=1)
        hwm = cfg.link_capacity
        self.inbox = make_socket(self.ctx, zmq.PULL, cfg.ipc(f"shard-{shard}.ipc"), bind=False,
                                 hwm=hwm)
        curve = security.service_client(cfg.curve_keys) if cfg.curve_keys else None
        self.out = make_socket(self.ctx, zmq.PUSH, cfg.output, bind=False, hwm=hwm, curve=curve)
        self.back = make_socket(self.ctx, zmq.PUSH, cfg.ipc("back.ipc"), bind=False, hwm=hwm)
        self.health = make_socket(self.ctx, zmq.PUSH, cfg.ipc("health.ipc"), bind=False,
                                  hwm=64, linger_ms=0)
        self.seq = 0
        self.columnar = cfg.output_format == "columnar"
        self.started = False
        self.processed = 0  # FORWARD messages since START, acknowledged to the egress
        self._next_report = 0.0
        m = Metrics()
        label = str(shard)
        self.m_rows, self.m_tokens = m.rows.labels(label), m.tokens.labels(label)
        self.m_late = m.late_rows.labels(label)
        self.m_ignored = m.ignored_opens.labels(label)
        self.m_rejected = m.rejected.labels(label)
        self.m_live = m.live.labels(label)
        self.m_decode = m.decode_seconds.labels(label)
        self.m_latency = m.frame_latency
        self.m_terminal = m.terminal_errors.labels("service")
        self._last = msgspec.structs.asdict(self.table.counters)

    def run(self) -> None:
        self._hello()
        inbox = self.inbox
        while True:
            self.beat()
            if not inbox.poll(POLL_MS):
                self._publish()
                if not parent_alive(self.parent_pid):
                    log.warning("supervisor is gone; exiting")
                    return
                continue
            msg = memoryview(inbox.recv())
            kind = bytes(msg[:1])
            if kind == link.FORWARD or kind == link.ROWS:
                if self.started:
                    try:
                        self.on_forward(msg)
                    except Exception:  # a bug costs this message's requests, not the shard
                        log.exception("internal error on a message")
                        self._fail_message(msg)
                    self.processed += 1
                    now = time.monotonic()
                    if now >= self._next_report or not inbox.poll(0):
                        self._ack()
                        self._publish()
                        self._next_report = now + REPORT_EVERY_S
            elif kind == link.START and not self.started:
                self.started = True  # a repeated START (our second Hello) changes nothing
                self.processed = 0
            elif kind == link.SYNC:
                self._sync()
            elif kind == link.DROP:
                message, rids = link.drop_decoder.decode(msg[1:])
                out: list[Delta] = []
                self.table.on_drop(rids, message, out)
                if out:
                    self._send(out)
                self._publish()
            elif kind == link.EXIT:
                log.info("drained; exiting")
                break
        self.close()

    def _ack(self) -> None:
        self.back.send(link.notice_encoder.encode(link.Ack(self.shard, self.processed)))

    def _hello(self) -> None:
        self.back.send(link.notice_encoder.encode(link.Hello(self.shard, os.getpid())))

    def _sync(self) -> None:
        """A new egress: it cannot know our live rids, so end them now and start over."""
        out: list[Delta] = []
        self.table.fail_all(protocol.EGRESS_RESTARTED, out)
        if out:
            self._send(out)
        self.started = False
        self._hello()

    def on_forward(self, msg: memoryview) -> None:
        t0 = time.perf_counter()
        stamp = link.STAMP.unpack_from(msg, 1)[0]
        owners = None
        if msg[0] == link.ROWS[0]:
            n = int.from_bytes(msg[9:13], "little")
            owners, frame = msg[13:13 + n], msg[13 + n:]
        else:
            frame = msg[9:]
        out: protocol.Sink = protocol.ColumnsOut() if self.columnar else []
        table = self.table
        tag = frame[0]
        if tag == protocol.TAG_BATCH:
            table.on_batch(protocol.decode_batch(frame), out, owners)
        else:
            ctl = protocol.decode_control(frame)
            if isinstance(ctl, Open):
                table.on_open(ctl, out)
            elif isinstance(ctl, Error):
                table.on_error(ctl, out)
            elif isinstance(ctl, Abort):
                table.on_abort(ctl, out)
            elif isinstance(ctl, Result):
                table.on_result(ctl, out)
            elif isinstance(ctl, Ping):
                pong = protocol.encode_pong(Pong(ctl.nonce, self.shard))
                if ctl.nonce < 0:
                    try:
                        self.health.send(pong, zmq.NOBLOCK)
                    except zmq.Again:
                        pass
                else:
                    self.out.send(pong)
                return
        if out:
            self._send(out)
        self.m_decode.observe(time.perf_counter() - t0)
        self.m_latency.observe(time.monotonic() - stamp)

    def _fail_message(self, msg: memoryview) -> None:
        """End every live rid a message named, after an internal error processing it."""
        try:
            frame = msg[13 + int.from_bytes(msg[9:13], "little"):] if msg[0] == link.ROWS[0] \
                else msg[9:]
            rids = protocol.decode_batch(frame).rids if frame[0] == protocol.TAG_BATCH else []
        except Exception:
            rids = []
        out: list[Delta] = []
        for rid in dict.fromkeys(rids):
            if rid in self.table.live:
                self.table.on_drop([rid], "internal detokenizer error", out)
        if out:
            self._send(out)

    def _send(self, out: protocol.Sink) -> None:
        self.out.send(protocol.encode_output(self.cfg.output_format, self.shard, self.seq, out))
        self.seq += 1
        if self.table.self_ended:
            ended = link.Ended(self.shard, self.table.self_ended)
            self.back.send(link.notice_encoder.encode(ended))
            self.table.self_ended = []

    def _publish(self) -> None:
        """Counters to Prometheus, as differences since the last message."""
        now = msgspec.structs.asdict(self.table.counters)
        last = self._last
        for name, metric in (("rows", self.m_rows), ("tokens", self.m_tokens),
                             ("late_rows", self.m_late), ("ignored_opens", self.m_ignored),
                             ("rejected", self.m_rejected)):
            if now[name] != last[name]:
                metric.inc(now[name] - last[name])
        self._last = now
        self.m_live.set(len(self.table.live))

    def close(self) -> None:
        for sock in (self.inbox, self.back, self.health, self.out):
            sock.close()
        self.ctx.term()
