"""`sglang-tok demo`: the service doing its main job, end to end, on this machine.

Starts `sglang-tok serve` on the built-in tokenizer, plays a scheduler streaming
multilingual requests into its input ring, plays the frontend on its output, checks
every request against a full `decode`, and prints what it saw.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .client import Frontend, Scheduler, barrier
from .config import default_shards
from .tokenizer import load
from .workload import PlanSpec, make_requests, schedule, verify


def run(requests: int, concurrency: int, shards: int | None, tokenizer: str) -> int:
    shards = shards or default_shards()
    info = load(tokenizer)
    runtime = Path(tempfile.mkdtemp(prefix="sglang-tok-demo-"))
    output = f"ipc://{runtime}/frontend.ipc"
    front = Frontend(output)
    cmd = [sys.executable, "-m", "sglang_tok.cli", "serve", "--tokenizer", tokenizer,
           "--shards", str(shards), "--runtime-dir", str(runtime / "rt"), "--http",
           "127.0.0.1:0", "--output", output]
    print(f"starting: {' '.join(cmd[2:])}", flush=True)
    proc = subprocess.Popen(cmd)
    try:
        port_file = runtime / "rt" / "http.port"
        deadline = time.monotonic() + 60
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                print("the service did not start", file=sys.stderr)
                return 1
            time.sleep(0.1)
        sched = Scheduler(f"ipc://{runtime}/rt/input.ipc")
        spec = PlanSpec(requests=requests, concurrency=concurrency, ids_per_row=(1, 2),
                        min_tokens=16, max_tokens=128, logprob_share=0.05, stop_share=0.1,
                        options_share=0.2, special_share=0.1, prompt_share=0.2, seed=1)
        reqs = make_requests(info, spec)
        t0 = time.perf_counter()
        tokens = 0
        for step in schedule(reqs, concurrency, 1):
            for f in step.opens:
                sched.send(f)
            if step.batch is not None:
                sched.send(step.batch)
                tokens += step.tokens
            for f in step.ends:
                sched.send(f)
            front.poll(0)
        if not barrier(sched, front, shards, 60):
            print("timed out waiting for the last deltas", file=sys.stderr)
            return 1
        elapsed = time.perf_counter() - t0
        problems = [p for r in reqs for p in verify(r, front.requests.get(r.rid), info)]
        for r in reqs[:3]:
            print(f"  {r.rid}: {front.requests[r.rid].text[:70]!r}")
        print(f"{len(reqs)} requests, {tokens} tokens through {shards} shards in "
              f"{elapsed:.2f}s ({tokens / elapsed:,.0f} tokens/s incl. the client)")
        print(f"exact: {len(reqs) - len({p.split(':')[0] for p in problems})}/{len(reqs)}; "
              f"protocol violations: {len(front.violations)}")
        for p in problems[:10]:
            print("  " + p)
        sched.close()
        return 0 if not problems and not front.violations else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        front.close()
        shutil.rmtree(runtime, ignore_errors=True)
