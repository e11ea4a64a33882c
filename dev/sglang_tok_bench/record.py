"""Record a scheduler's frames: bind as the input ring in the service's place
(`scripts/load/record.py`).

Every frame that arrives is written to the trace with its arrival time, and with a
forward endpoint also pushed on to a running service's input ring.
"""

from __future__ import annotations

import argparse
import signal
import time

import zmq

from ring.sockets import make_socket
from sglang_tok.kit.scheduler import Scheduler
from sglang_tok.tracefile import TraceWriter


def record(out: str, input_ep: str, forward: str = "", tokenizer: str = "deepseek-v4",
           seconds: float = 0, frames: int = 0, ready: str = "",
           stop: list[int] | None = None) -> int:
    """Record until `stop` gets an item, or the time or frame budget is spent."""
    stop = [] if stop is None else stop
    ctx = zmq.Context()
    pull = make_socket(ctx, zmq.PULL, input_ep, bind=True, hwm=10000, linger_ms=0)
    # forwarding is a scheduler's PUSH: the kit's writer socket, frames passed through as is
    push = Scheduler(forward, ctx=ctx, hwm=10000) if forward else None
    writer = TraceWriter(out, {"tokenizer": tokenizer, "created": time.time(),
                               "recorded_from": input_ep})
    if ready:
        open(ready, "w").close()
    t0 = None
    deadline = time.monotonic() + seconds if seconds else None
    try:
        while not stop and (not frames or writer.count < frames):
            if deadline and time.monotonic() > deadline:
                break
            if not pull.poll(100):
                continue
            frame = pull.recv()
            now = time.monotonic()
            t0 = now if t0 is None else t0
            writer.write(now - t0, frame)
            if push is not None:
                push.send(frame)
    finally:
        writer.close()
        pull.close()
        if push is not None:
            push.close()
        ctx.term()
    return writer.count


def main(a: argparse.Namespace) -> int:
    """`scripts/load/record.py`: record until Ctrl-C, SIGTERM, or the time or frame budget."""
    stop: list[int] = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    n = record(a.out, a.input, a.forward, a.tokenizer, a.seconds, a.frames, stop=stop,
               ready=a.ready)
    print(f"recorded {n} frames to {a.out}")
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/record.py` (its `main` parses them)."""
    ap.add_argument("out")
    ap.add_argument("--input", required=True, help="endpoint to bind, where the scheduler pushes")
    ap.add_argument("--forward", default="", help="a running service's input ring")
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--frames", type=int, default=0)
    ap.add_argument("--ready", default="", help="a file to create once the input is bound")
