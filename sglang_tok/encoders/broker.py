"""The encode broker: clients' ROUTER in front, workers' ROUTER behind, each request to an
idle worker (the ZeroMQ guide's load-balancing broker, "LRU queue").

Why a process of its own: the egress loop is the detokenizer's hot path and the supervisor
must never block on client traffic; the broker only validates and forwards, so one small
loop serves many workers. Why not round-robin: a worker holds one request at a time and
asks for the next when done, so a 20,000-token prompt occupies one worker while short
prompts flow through the others. When every worker is busy, requests wait in a bounded
queue here (a full queue answers with an error, never blocks the loop).

The broker knows which request each worker holds. A worker that dies (its pid leaves its
status slot when the supervisor reaps it) has its request answered with an error; the
supervisor restarts it and the new process announces itself.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import zmq

from ring.sockets import make_socket
from sglang_tok.config import Config, refusing
from sglang_tok.metrics import Metrics
from sglang_tok.process import Beat, Status, parent_alive, setup_child

from . import wire

log = logging.getLogger("sglang_tok.encode")
POLL_MS = 100
BURST = 256  # messages read from one socket before the loop turns to the other


@dataclass
class Job:
    envelope: list[bytes]  # the client's routing frames, echoed on the reply
    body: bytes  # the request, validated
    rid: wire.Scalar


@dataclass
class Worker:
    ident: bytes
    slot: int
    pid: int
    job: Job | None = None


def main(cfg: Config, status: Status, slot: int, parent_pid: int) -> None:
    setup_child("sglang-tok encode-broker", cfg.log_level)
    Broker(cfg, status, slot, parent_pid).run()


def _burst(sock: zmq.Socket) -> Iterator[list[bytes]]:
    """What is waiting on `sock`, BURST messages at the most: a busy socket must not keep
    the loop from the other one (or from its heartbeat)."""
    for _ in range(BURST):
        try:
            yield sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return


class Broker:
    def __init__(self, cfg: Config, status: Status, slot: int, parent_pid: int) -> None:
        self.cfg = cfg
        self.status = status
        self.beat = Beat(status, slot)
        self.parent_pid = parent_pid
        self.limits = wire.Limits(cfg.encode_max_texts, cfg.encode_max_text_chars,
                                  cfg.encode_max_total_chars)
        self.ctx = zmq.Context(io_threads=1)
        # libzmq refuses (drops the connection of) a message no valid request could be
        with refusing("encode", cfg.encode):
            self.front = make_socket(self.ctx, zmq.ROUTER, cfg.encode, bind=True,
                                     hwm=max(1000, cfg.encode_queue), linger_ms=1000,
                                     max_msg_bytes=self.limits.max_bytes)
        self.back = make_socket(self.ctx, zmq.ROUTER, cfg.ipc("encode-workers.ipc"),
                                bind=True, hwm=1000, linger_ms=0)
        # a send to a worker that has gone raises instead of vanishing
        self.back.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.workers: dict[bytes, Worker] = {}
        self.idle: deque[bytes] = deque()  # least recently used first
        self.queue: deque[Job] = deque()
        m = Metrics()
        self.m_requests = m.encode_requests
        self.m_queue = m.encode_queue
        self.m_errors = {reason: m.encode_errors.labels(reason) for reason in wire.ERROR_REASONS}
        self.m_queue.set(0)

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        log.info("encode service on %s", self.cfg.encode)
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        poller.register(self.back, zmq.POLLIN)
        while not self.status.draining:
            self.beat()
            events = dict(poller.poll(POLL_MS))
            if self.back in events:
                self.on_workers()
            if self.front in events:
                self.on_clients()
            self.check_workers()
            self.dispatch()
            if not events and not parent_alive(self.parent_pid):
                log.warning("supervisor is gone; exiting")
                break
        self.drain()
        self.front.close()
        self.back.close()
        self.ctx.term()

    def on_clients(self) -> None:
        for frames in _burst(self.front):
            self.m_requests.inc()
            envelope, body = frames[:-1], frames[-1]
            try:
                req = wire.check(body, self.limits)
            except wire.Invalid as exc:
                self.fail(envelope, wire.request_id(body), exc.reason, str(exc))
                continue
            if len(self.queue) >= self.cfg.encode_queue:
                self.fail(envelope, req.id, wire.QUEUE_FULL,
                          f"every encode worker is busy and --encode-queue "
                          f"{self.cfg.encode_queue} requests are waiting; retry later")
                continue
            self.queue.append(Job(envelope, body, req.id))
            self.dispatch()

    def on_workers(self) -> None:
        for frames in _burst(self.back):
            ident, kind = frames[0], frames[1]
            worker = self.workers.get(ident)
            if worker is None:
                worker = self.meet(ident)
                if worker is None:
                    continue
                if kind == wire.REPLY:  # held since before this broker started
                    log.warning("dropped a reply from %s for a request of a previous broker",
                                ident)
            elif kind == wire.REPLY and worker.job is not None and len(frames) == 3:
                self.front.send_multipart([*worker.job.envelope, frames[2]])
                worker.job = None
                self.idle.append(ident)
            # a READY from a known worker changes nothing: idle ones are queued already,
            # and a busy one's READY crossed the job we sent it

    def meet(self, ident: bytes) -> Worker | None:
        try:
            slot, pid = map(int, ident.split(b":"))
        except ValueError:
            log.warning("ignoring a peer with routing id %r on the workers' socket", ident)
            return None
        worker = self.workers[ident] = Worker(ident, slot, pid)
        self.idle.append(ident)
        log.info("encode worker pid %d (slot %d) is ready", pid, slot)
        return worker

    def check_workers(self) -> None:
        """A worker whose pid left its status slot has died: fail what it held."""
        status = self.status
        for worker in [w for w in self.workers.values() if status.pid(w.slot) != w.pid]:
            del self.workers[worker.ident]
            if worker.job is not None:
                log.warning("encode worker pid %d died holding a request", worker.pid)
                self.fail(worker.job.envelope, worker.job.rid, wire.WORKER_DIED,
                          "the encode worker died while holding this request; retry")

    def dispatch(self) -> None:
        queue, idle = self.queue, self.idle
        while queue and idle:
            ident = idle.popleft()
            worker = self.workers.get(ident)
            if worker is None or worker.job is not None:
                continue  # forgotten since it queued itself
            job = queue.popleft()
            try:
                self.back.send_multipart([ident, wire.JOB, job.body], copy=False)
            except zmq.ZMQError:  # EHOSTUNREACH: it disconnected; the next one takes it
                del self.workers[ident]
                queue.appendleft(job)
                continue
            worker.job = job
        self.m_queue.set(len(queue))

    def fail(self, envelope: list[bytes], rid: wire.Scalar, reason: str, message: str) -> None:
        self.m_errors[reason].inc()
        self.front.send_multipart([*envelope, wire.error_reply(rid, message)])

    # ------------------------------------------------------------------ shutdown
    def drain(self) -> None:
        """Answer every request still here: held ones by their workers while the supervisor's
        drain deadline allows, queued ones (and the rest) with an error."""
        while self.queue:
            job = self.queue.popleft()
            self.fail(job.envelope, job.rid, wire.SHUTTING_DOWN, "the service is shutting down")
        self.m_queue.set(0)
        deadline = time.monotonic() + max(0.0, self.cfg.drain_timeout - 0.5)
        while any(w.job for w in self.workers.values()) and time.monotonic() < deadline:
            self.beat()
            if self.back.poll(POLL_MS):
                self.on_workers()
            self.check_workers()
        for worker in self.workers.values():
            if worker.job is not None:
                self.fail(worker.job.envelope, worker.job.rid, wire.SHUTTING_DOWN,
                          "the service is shutting down")
