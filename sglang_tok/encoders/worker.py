"""An encode worker: its own tokenizer, one request at a time, handed to it by the broker.

No state is shared with any other process: a worker that dies loses only the one request
it held, which the broker answers with an error. The broker validated the request before
dispatch, so a worker only ever sees well-formed requests within the limits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import msgspec
import zmq

from sglang_tok.config import Config
from sglang_tok.metrics import Metrics
from sglang_tok.process import Beat, Status, parent_alive, setup_child
from sglang_tok.tokenizer import load_tokenizer

from . import wire
from .cores import pin_to

log = logging.getLogger("sglang_tok.encode")
POLL_MS = 100
READY_EVERY_S = 1.0  # an idle worker re-announces itself, so a restarted broker finds it
# A request at the limits may take longer than --heartbeat-timeout to encode. While the
# loop is inside encode_batch (which releases the GIL) a helper thread beats for it, but
# only for 1 s plus the request's characters at this rate, far below any measured one
# (50,000 chars/s for DeepSeek-V4 on a loaded 2-core machine): a call stuck beyond that
# stops beating and the supervisor kills the worker.
MIN_CHARS_PER_S = 10_000


def main(cfg: Config, status: Status, slot: int, index: int, cores: list[int] | None,
         parent_pid: int) -> None:
    title = f"sglang-tok encode-worker {index}"
    setup_child(title, cfg.log_level)
    # one core per worker: the tokenizer's own thread pool would fight the other workers
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    pin_to(cores, title)
    tokenizer = load_tokenizer(cfg.tokenizer)
    # a tokenizer.json may ask for batch padding; `encode` of one text never pads, and a
    # reply must equal `encode` of each text, batched or not
    tokenizer.no_padding()
    Worker(cfg, status, slot, tokenizer, parent_pid).run()


class Worker:
    def __init__(self, cfg: Config, status: Status, slot: int, tokenizer: Any,
                 parent_pid: int) -> None:
        self.status = status
        self.beat = Beat(status, slot)
        self.tokenizer = tokenizer
        self.parent_pid = parent_pid
        self.ctx = zmq.Context(io_threads=1)
        sock = self.sock = self.ctx.socket(zmq.DEALER)
        # the broker reads our status slot and pid from the routing id
        sock.setsockopt(zmq.ROUTING_ID, f"{slot}:{os.getpid()}".encode())
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(cfg.ipc("encode-workers.ipc"))
        self.decoder = msgspec.msgpack.Decoder(wire.EncodeRequest)
        m = Metrics()
        self.m_texts, self.m_tokens = m.encode_texts, m.encode_tokens
        self.m_seconds = m.encode_seconds
        self.m_internal = m.encode_errors.labels(wire.INTERNAL)
        self.cover = Cover(self.beat)

    def run(self) -> None:
        sock = self.sock
        sock.send(wire.READY)
        next_ready = time.monotonic() + READY_EVERY_S
        while True:
            self.beat()
            if not sock.poll(POLL_MS):
                if self.status.draining or not parent_alive(self.parent_pid):
                    break  # idle, nothing pending: the broker drains what we held
                now = time.monotonic()
                if now >= next_ready:
                    sock.send(wire.READY)
                    next_ready = now + READY_EVERY_S
                continue
            frames = sock.recv_multipart(copy=True)
            if len(frames) != 2 or frames[0] != wire.JOB:
                continue
            sock.send_multipart([wire.REPLY, self.encode(frames[1])])
            next_ready = time.monotonic() + READY_EVERY_S
        sock.close()
        self.ctx.term()

    def encode(self, body: bytes) -> bytes:
        t0 = time.perf_counter()
        try:
            req = self.decoder.decode(body)
            encodings = self.encode_texts(req.texts, req.add_special_tokens)
            ids = [e.ids for e in encodings]
            offsets = [e.offsets for e in encodings] if req.offsets else None
            reply = wire.encoder.encode(wire.EncodeReply(req.id, ids, offsets))
        except Exception as exc:  # a bug costs this request, not the worker
            log.exception("internal error encoding a request")
            self.m_internal.inc()
            return wire.error_reply(wire.request_id(body), f"internal encode error: {exc}")
        self.m_seconds.observe(time.perf_counter() - t0)
        self.m_texts.inc(len(ids))
        self.m_tokens.inc(sum(map(len, ids)))
        return reply

    def encode_texts(self, texts: list[str], add_special_tokens: bool) -> list[Any]:
        self.cover.until = time.monotonic() + 1.0 + sum(map(len, texts)) / MIN_CHARS_PER_S
        try:
            return self.tokenizer.encode_batch(texts,  # type: ignore[no-any-return]
                                               add_special_tokens=add_special_tokens)
        finally:
            self.cover.until = 0.0


class Cover:
    """Beats for the worker's loop while it is inside one encode call, up to `until`."""

    def __init__(self, beat: Beat) -> None:
        self.beat = beat
        self.until = 0.0
        threading.Thread(target=self.run, name="beat-cover", daemon=True).start()

    def run(self) -> None:
        while True:
            time.sleep(0.25)
            if time.monotonic() < self.until:
                self.beat()
