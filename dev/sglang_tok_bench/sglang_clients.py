"""Streaming HTTP clients for `sglang_server.py` (`scripts/sglang/server.py`): N of them,
each sending one streaming request after another to an SGLang server (`/generate`,
`/v1/completions`, `/v1/chat/completions`, taken in turn), for a warm-up and then a
measured window.

Run with a python that has aiohttp (SGLang's environment has it), as a process of its own
(the server bench starts several). It prints `WINDOW START` and `WINDOW END` on stdout as
the measured window opens and closes (the bench reads the server's CPU times then), then
writes one JSON file: every request that ended (rid, endpoint, its streamed text, its
finish) and, for the window, the ids streamed and the gaps between a stream's chunks as
the client saw them. It imports nothing of the package
but `gap_hist` (plain Python).

    python -m sglang_tok_bench.sglang_clients --url http://127.0.0.1:30000 \
        --clients 256 --seconds 15 --warmup 5 --out clients.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sglang_tok_bench.gap_hist import gap_histogram, percentile

ENDPOINTS = ("generate", "completions", "chat")
PROMPTS = ["Tell me about detokenizers.", "写一首关于大海的诗。", "Explain ZeroMQ briefly.",
           "Какая погода завтра?", "List three prime numbers.", "東京の観光地を教えて。"]


@dataclass
class Window:
    start: float = float("inf")
    end: float = float("inf")
    ids: int = 0
    chunks: int = 0
    gaps: list[float] = field(default_factory=list)

    def inside(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass
class Done:
    rid: str
    endpoint: str
    text: str
    finish: Any
    ids: int
    logprobs: bool


@dataclass
class Failed:
    """A stream that did not end with a finish of its own: an HTTP error, an error chunk,
    an abort finish, a dropped connection, or (`hung`) no chunk for --read-timeout s."""

    rid: str
    endpoint: str
    text: str  # what it streamed before
    why: str
    hung: bool = False
    at: float = field(default_factory=time.time)  # when it failed (wall clock)


def body(endpoint: str, k: int, args: argparse.Namespace, logprob: bool) -> dict[str, Any]:
    steer = {"sglang_tok_ids_per_step": args.ids_per_step, "sglang_tok_length": args.length}
    prompt = f"{PROMPTS[k % len(PROMPTS)]} ({k})"
    if endpoint == "generate":
        sp = {"max_new_tokens": args.max_new_tokens, "custom_params": steer}
        out: dict[str, Any] = {"text": prompt, "sampling_params": sp, "stream": True}
        if logprob:
            out.update(return_logprob=True, top_logprobs_num=5)
        return out
    usage = {"include_usage": True, "continuous_usage_stats": True}
    common = {"model": "default", "stream": True, "max_tokens": args.max_new_tokens,
              "custom_params": steer, "stream_options": usage}
    if endpoint == "completions":
        return {**common, "prompt": prompt, **({"logprobs": 5} if logprob else {})}
    return {**common, "messages": [{"role": "user", "content": prompt}],
            **({"logprobs": True, "top_logprobs": 5} if logprob else {})}


PATHS = {"generate": "/generate", "completions": "/v1/completions",
         "chat": "/v1/chat/completions"}


class Chunks:
    """What one stream's chunks say, by endpoint."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.rid = ""
        self.text = ""
        self.ids = 0
        self.finish: Any = None
        self.error: Any = None

    def take(self, data: dict[str, Any]) -> int:
        """Read a chunk; the ids it brought."""
        if "error" in data or data.get("object") == "error":
            self.error = data.get("error") or data.get("message") or data
            return 0
        before = self.ids
        if self.endpoint == "generate":
            meta = data.get("meta_info", {})
            self.rid = meta.get("id", self.rid)
            self.text = data.get("text", self.text)  # cumulative
            self.ids = meta.get("completion_tokens", self.ids)
            if meta.get("finish_reason") is not None:
                self.finish = meta["finish_reason"]
            return self.ids - before
        self.rid = data.get("id", self.rid)
        for choice in data.get("choices") or ():
            if self.endpoint == "chat":
                self.text += (choice.get("delta") or {}).get("content") or ""
            else:
                self.text += choice.get("text") or ""
            if choice.get("finish_reason") is not None:
                self.finish = choice["finish_reason"]
        usage = data.get("usage")
        if usage:
            self.ids = usage.get("completion_tokens", self.ids)
        return self.ids - before


async def one(session: aiohttp.ClientSession, url: str, endpoint: str, k: int,
              args: argparse.Namespace, rng: random.Random, window: Window,
              done: list[Done], failed: list[Failed]) -> None:
    logprob = rng.random() < args.logprob_share
    chunks = Chunks(endpoint)
    try:
        await _stream(session, url, endpoint, body(endpoint, k, args, logprob), chunks, window)
    except TimeoutError:
        failed.append(Failed(chunks.rid, endpoint, chunks.text,
                             f"no chunk for {args.read_timeout:g}s", hung=True))
        return
    except aiohttp.ClientError as exc:
        failed.append(Failed(chunks.rid, endpoint, chunks.text, f"{type(exc).__name__}: {exc}"))
        await asyncio.sleep(0.1)
        return
    fin = chunks.finish
    if chunks.error is not None:
        failed.append(Failed(chunks.rid, endpoint, chunks.text, str(chunks.error)[:300]))
    elif fin is None or fin == "abort" or (isinstance(fin, dict) and fin.get("type") == "abort"):
        failed.append(Failed(chunks.rid, endpoint, chunks.text, f"finish {fin}"[:300]))
    else:
        done.append(Done(chunks.rid, endpoint, chunks.text, fin, chunks.ids, logprob))


async def _stream(session: aiohttp.ClientSession, url: str, endpoint: str,
                  payload_in: dict[str, Any], chunks: Chunks, window: Window) -> None:
    last = None
    async with session.post(url + PATHS[endpoint], json=payload_in) as r:
        if r.status != 200:
            chunks.error = f"HTTP {r.status}: {(await r.text())[:200]}"
            await asyncio.sleep(0.1)
            return
        async for line in r.content:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            got = chunks.take(json.loads(payload))
            if got:
                now = time.monotonic()
                if window.inside(now):
                    window.ids += got
                    window.chunks += 1
                    if last is not None:
                        window.gaps.append(now - last)
                last = now


async def client(i: int, session: aiohttp.ClientSession, args: argparse.Namespace,
                 stop: float, window: Window, done: list[Done], failed: list[Failed]) -> None:
    k = args.first + i  # client i of this process is client first + i of all processes
    rng = random.Random(k)
    endpoints = args.endpoints.split(",")
    while time.monotonic() < stop:
        await one(session, args.url, endpoints[k % len(endpoints)], k, args, rng, window,
                  done, failed)
        k += args.stride or args.clients


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    window = Window()
    done: list[Done] = []
    failed: list[Failed] = []
    start = time.monotonic()
    window.start = start + args.warmup
    window.end = window.start + args.seconds
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=args.read_timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(client(i, session, args, window.end, window, done, failed))
                 for i in range(args.clients)]
        await asyncio.sleep(max(0.0, window.start - time.monotonic()))
        print("WINDOW START", flush=True)
        await asyncio.sleep(max(0.0, window.end - time.monotonic()))
        print("WINDOW END", flush=True)
        # streams running past the window finish (bounded), so that they are checked too
        finished, pending = await asyncio.wait(tasks, timeout=args.drain)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        hung = len(pending)
    hist = gap_histogram(window.gaps)
    return {"clients": args.clients, "seconds": args.seconds, "ids": window.ids,
            "chunks": window.chunks, "ids_per_s": window.ids / args.seconds,
            "itl_p50_ms": percentile(hist, 0.50), "itl_p99_ms": percentile(hist, 0.99),
            "itl_samples": len(window.gaps), "gap_hist": hist,
            "errors": [f.why for f in failed[:20]],
            "error_count": len(failed), "hung": sum(f.hung for f in failed), "cut_off": hung,
            "done": [d.__dict__ for d in done], "failed": [f.__dict__ for f in failed]}


def main() -> int:
    ap = argparse.ArgumentParser(description="Streaming HTTP clients for an SGLang server.")
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=15.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--drain", type=float, default=30.0,
                    help="seconds streams may run on after the window")
    ap.add_argument("--first", type=int, default=0,
                    help="the index of this process's first client among all processes'")
    ap.add_argument("--stride", type=int, default=0,
                    help="the clients of all processes together (default --clients)")
    ap.add_argument("--endpoints", default=",".join(ENDPOINTS))
    ap.add_argument("--ids-per-step", type=int, default=1)
    ap.add_argument("--length", type=int, default=128, help="mean output ids per request")
    ap.add_argument("--max-new-tokens", type=int, default=1024)
    ap.add_argument("--logprob-share", type=float, default=0.0)
    ap.add_argument("--read-timeout", type=float, default=60.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(main_async(args))
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(f"clients: {result['ids_per_s']:.0f} ids/s, {len(result['done'])} done, "
          f"{result['error_count']} errors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
