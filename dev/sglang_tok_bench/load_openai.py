"""Load the example OpenAI server: many concurrent streaming chat completions, each checked
(`scripts/load/load_openai.py`).

Every stream goes through the official `openai` package. Each stream's text is compared
with what the simulated scheduler generated for it (`/debug/requests/{id}`: the full
`tokenizer.decode` of its ids). Reports requests/s, time to first content chunk p50/p99,
and the inter-chunk gap p99 over every stream. Exit 0 when every stream was exact.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import uvloop

from sglang_tok_bench.figures import percentile
from sglang_tok_testkit.processes import terminate


async def one(client: openai.AsyncOpenAI, k: int, max_tokens: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"load request {k}"}], stream=True,
        max_tokens=max_tokens, stream_options={"include_usage": True})
    cid, parts, stamps = "", [], []
    async for c in stream:
        cid = c.id
        if c.choices and c.choices[0].delta.content:
            stamps.append(time.perf_counter())
            parts.append(c.choices[0].delta.content)
    return {"id": cid, "text": "".join(parts), "start": t0, "stamps": stamps,
            "end": time.perf_counter()}


# the example OpenAI server, started without --url (a checkout's: dev/ is installed editable)
SERVER = Path(__file__).resolve().parents[2] / "examples" / "openai_server.py"

def http_client(backend: str, streams: int) -> Any:
    """httpx's own pool does work per connection on every request: at hundreds of open
    streams the load generator, not the server, sets the figures. aiohttp's transport
    (`openai[aiohttp]`, the package's own option) does not. (Any: the openai package
    takes an httpx client, or by its release an httpx2 one, and says so in its types.)"""
    limits = httpx.Limits(max_connections=streams + 16, max_keepalive_connections=streams + 16)
    if backend == "aiohttp":
        return openai.DefaultAioHttpClient(limits=limits, timeout=300)  # type: ignore[arg-type]
    return httpx.AsyncClient(limits=limits, timeout=300)


async def drive(url: str, first: int, count: int, max_tokens: int,
                backend: str) -> list[dict[str, Any]]:
    http = http_client(backend, count)
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0,
                                http_client=http)
    try:
        return list(await asyncio.gather(*(one(client, k, max_tokens)
                                           for k in range(first, first + count))))
    finally:
        await client.close()


def share(url: str, first: int, count: int, max_tokens: int,
          backend: str) -> tuple[list[dict[str, Any]], float]:
    """One load process's streams, and the CPU seconds it spent on them."""
    results = uvloop.run(drive(url, first, count, max_tokens, backend))
    return results, time.process_time()


def load(url: str, streams: int, procs: int, max_tokens: int,
         backend: str) -> tuple[list[dict[str, Any]], float, float]:
    """All streams at once, over `procs` processes (the openai package parses every chunk
    into models: one client process can cost more CPU than the server it measures)."""
    if procs <= 1:
        results, cpu = share(url, 0, streams, max_tokens, backend)
        return results, wall_of(results), cpu
    sizes = [streams // procs + (k < streams % procs) for k in range(procs)]
    starts = [sum(sizes[:k]) for k in range(procs)]
    with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("spawn")) as ex:
        futs = [ex.submit(share, url, a, n, max_tokens, backend) for a, n in zip(starts, sizes)]
        parts = [f.result() for f in futs]
    results = [r for rs, _ in parts for r in rs]
    return results, wall_of(results), sum(c for _, c in parts)


def wall_of(results: list[dict[str, Any]]) -> float:
    # perf_counter is CLOCK_MONOTONIC: one clock for every process of the machine
    return max(r["end"] for r in results) - min(r["start"] for r in results)


def check(url: str, results: list[dict[str, Any]]) -> list[str]:
    bad = []
    with httpx.Client(timeout=30) as h:
        for r in results:
            want = h.get(f"{url}/debug/requests/{r['id']}").json()
            if r["text"] != want.get("text"):
                bad.append(f"{r['id']}: {r['text'][-40:]!r} != {want.get('text', '')[-40:]!r}")
    return bad


def start_server(server: Path, args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """`examples/openai_server.py` (its path: `server`) on a free port, once /health is 200."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(server), "--port", str(port), *args],
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_server(proc)
    raise SystemExit("the OpenAI server did not start")


def cpu_seconds(proc: subprocess.Popen[bytes] | None) -> dict[str, float]:
    """CPU seconds of the OpenAI server process and of the service under it, so far."""
    if proc is None:
        return {}
    import psutil
    root = psutil.Process(proc.pid)
    kids = root.children(recursive=True)
    t = root.cpu_times()
    return {"openai_server": round(t.user + t.system, 1),
            "service": round(sum(sum(k.cpu_times()[:2]) for k in kids), 1)}


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    terminate(proc, 60, group=True)


def main(a: argparse.Namespace) -> int:
    """`scripts/load/load_openai.py`: start the server unless given one, load, check."""
    proc = None
    url = a.url
    if not url:
        proc, url = start_server(Path(a.server),
                                 ["--shards", str(a.shards), "--step-ms", str(a.step_ms)])
    try:
        results, wall, client_cpu = load(url, a.streams, a.procs, a.max_tokens, a.backend)
        server_cpu = cpu_seconds(proc)
        bad = check(url, results)
        server_side = httpx.get(f"{url}/debug/stats", timeout=10).json()
    finally:
        if proc is not None:
            stop_server(proc)
    ttfc = [1000 * (r["stamps"][0] - r["start"]) for r in results if r["stamps"]]
    gaps = [1000 * (b - a_) for r in results for a_, b in zip(r["stamps"], r["stamps"][1:])]
    chunks = sum(len(r["stamps"]) for r in results)
    summary = {
        "streams": a.streams, "exact": a.streams - len(bad), "wall_s": round(wall, 2),
        "requests_per_s": round(a.streams / wall, 1), "content_chunks": chunks,
        "chunks_per_s": round(chunks / wall), "ttfc_ms_p50": round(percentile(ttfc, 50), 1),
        "ttfc_ms_p99": round(percentile(ttfc, 99), 1),
        "inter_chunk_ms_p50": round(percentile(gaps, 50), 1),
        "inter_chunk_ms_p99": round(percentile(gaps, 99), 1), "step_ms": a.step_ms,
        "backend": a.backend, "load_procs": a.procs,
        "cpu_s": {"load_client": round(client_cpu, 1), **server_cpu},
        "load_average_1m": round(os.getloadavg()[0], 1),
        "server_side": server_side,
    }
    print(json.dumps(summary, indent=1))
    for b in bad[:5]:
        print("MISMATCH", b)
    if a.json:
        Path(a.json).write_text(json.dumps(summary))
    return 0 if not bad else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/load_openai.py` (its `main` parses them)."""
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--url", default="", help="a running server; default: start one")
    ap.add_argument("--server", default=str(SERVER),
                    help="the server to start without --url (default: this checkout's "
                         "examples/openai_server.py)")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--step-ms", type=float, default=25.0)
    ap.add_argument("--json", default="")
    ap.add_argument("--procs", type=int, default=1, help="load processes to spread streams over")
    ap.add_argument("--backend", choices=("aiohttp", "httpx"),
                    default="aiohttp" if importlib.util.find_spec("httpx_aiohttp") else "httpx",
                    help="the openai client's HTTP transport")
