"""The HTTP process: /health and /metrics on uvloop, read from shared memory and files.

Health never asks the egress or shards anything: heartbeats and the activity counter are
in the shared status block, written by each process's own loop. `/health?deep=1` is the
exception by design: it pushes a PING through the real input ring and waits for the PONG
of the egress and of every shard (negative nonces are the service's own probes; their
PONGs come here, not to the frontend).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from typing import Any

import zmq

from ring.sockets import make_socket
from sglang_tok import security
from sglang_tok.config import Config, refusing
from sglang_tok.process import Beat, Status, parent_alive, service_roles, setup_child
from sglang_tok.protocols.model import control, output

log = logging.getLogger("sglang_tok.http")
MAX_REQUEST_BYTES = 8192
JSON = "application/json"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


def health_report(status: Status, roles: list[str], timeout: float
                  ) -> tuple[bool, dict[str, Any]]:
    """Healthy when the egress has started every shard and every loop ticked recently.

    `processes` lists every slot in status-block order (egress, shards, this process, then
    the encode service's).
    """
    now = time.monotonic()
    ok = status.egress_ready and now - status.supervisor_beat < timeout
    procs = []
    for slot, role in enumerate(roles):
        pid, beat = status.pid(slot), status.beat(slot)
        alive = pid > 0 and beat > 0 and now - beat < timeout
        ok = ok and alive
        procs.append({"role": role, "pid": pid, "alive": alive,
                      "beat_age_s": round(now - beat, 3)})
    report = {"status": "ok" if ok else "unhealthy", "activity": status.activity,
              "shards": sum(r.startswith("shard ") for r in roles), "processes": procs}
    return ok, report


class HttpServer:
    def __init__(self, cfg: Config, status: Status, parent_pid: int) -> None:
        self.cfg = cfg
        self.status = status
        self.parent_pid = parent_pid
        self.roles = service_roles(cfg.shards, cfg.encode_workers)
        self.beat = Beat(status, self.roles.index("http"))
        self.ctx = zmq.Context(io_threads=1)
        self.pongs = make_socket(self.ctx, zmq.PULL, cfg.ipc("health.ipc"), bind=True, hwm=1024,
                                 linger_ms=0)
        self.probe_lock = threading.Lock()
        self.ring: zmq.Socket | None = None  # made on the first deep probe, then kept
        self.nonces = itertools.count(1)

    # ------------------------------------------------------------------ endpoints
    def metrics(self) -> bytes:
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)

    def deep_probe(self, timeout: float = 3.0) -> tuple[bool, str]:
        """PING through the input ring; every process must answer before the deadline."""
        with self.probe_lock:
            nonce = -next(self.nonces)
            if self.ring is None:
                curve = (security.service_probe(self.cfg.curve_keys) if self.cfg.curve_keys
                         else None)
                self.ring = make_socket(self.ctx, zmq.PUSH, self.cfg.input, bind=False, hwm=16,
                                        linger_ms=0, sndtimeo_ms=int(timeout * 1000),
                                        curve=curve)
            try:
                self.ring.send(control.encode_control(control.Ping(nonce)))
            except zmq.Again:
                return False, "input ring is full"
            want = set(range(-1, self.cfg.shards))
            deadline = time.monotonic() + timeout
            while want:
                left = deadline - time.monotonic()
                if left <= 0 or not self.pongs.poll(int(left * 1000)):
                    return False, f"no PONG from {sorted(want)} within {timeout}s"
                pong = output.decode_output(self.pongs.recv())
                if isinstance(pong, control.Pong) and pong.nonce == nonce:
                    want.discard(pong.shard)
            return True, "every process answered"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        method, target = (line[0], line[1]) if len(line) >= 2 else ("", "")
        code, ctype, body = await self.route(method, target)
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed",
                  503: "Service Unavailable"}[code]
        writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: "
                     f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()

    async def route(self, method: str, target: str) -> tuple[int, str, bytes]:
        """Status code, content type and body for one request."""
        path, _, query = target.partition("?")
        loop = asyncio.get_running_loop()
        if method != "GET":
            return 405, JSON, b'{"error": "method not allowed"}'
        if path == "/health":
            ok, report = health_report(self.status, self.roles, self.cfg.heartbeat_timeout)
            if ok and "deep=1" in query:
                ok, why = await loop.run_in_executor(None, self.deep_probe)
                report["deep"] = why
                report["status"] = "ok" if ok else "unhealthy"
            return (200 if ok else 503), JSON, json.dumps(report).encode()
        if path == "/metrics":
            return 200, PROMETHEUS, await loop.run_in_executor(None, self.metrics)
        return 404, JSON, b'{"error": "not found"}'

    async def serve(self) -> None:
        with refusing("http", self.cfg.http):
            server = await asyncio.start_server(self.handle, self.cfg.http_host,
                                                self.cfg.http_port, limit=MAX_REQUEST_BYTES)
        port = server.sockets[0].getsockname()[1]
        self.status.http_port = port
        log.info("http listening on %s:%d", self.cfg.http_host, port)
        async with server:
            while parent_alive(self.parent_pid):
                self.beat()
                await asyncio.sleep(0.2)


def main(cfg: Config, status: Status, parent_pid: int) -> None:
    setup_child("sglang-tok http", cfg.log_level, holds_data=False)
    import uvloop
    server = HttpServer(cfg, status, parent_pid)
    uvloop.run(server.serve())
