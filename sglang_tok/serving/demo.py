"""`sglang-tok demo`: the service doing its main job, end to end, on this machine.

Starts `sglang-tok serve` on the built-in tokenizer, plays a scheduler streaming
multilingual requests into its input ring, plays the frontend on its output, checks
every request against a full `decode`, and prints what it saw.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from sglang_tok.config import default_shards
from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
from sglang_tok.process import shards_text
from sglang_tok.tokenizer import load


def run(requests: int, concurrency: int, shards: int | None, tokenizer: str) -> int:
    shards = shards or default_shards()
    info = load(tokenizer)
    tmp = Path(tempfile.mkdtemp(prefix="sglang-tok-demo-"))
    svc = LocalService(tmp, shards=shards, tokenizer=tokenizer)
    print(f"starting: {' '.join(svc.cmd[2:])}", flush=True)
    try:
        try:
            svc.start()
        except (RuntimeError, TimeoutError) as exc:
            print(f"the service did not start: {exc}", file=sys.stderr)
            return 1
        spec = PlanSpec(requests=requests, concurrency=concurrency, ids_per_row=(1, 2),
                        min_tokens=16, max_tokens=128, logprob_share=0.05, stop_share=0.1,
                        options_share=0.2, special_share=0.1, prompt_share=0.2, seed=1)
        reqs = make_requests(info, spec)
        t0 = time.perf_counter()
        tokens = svc.send_steps(schedule(reqs, concurrency, 1))
        try:
            svc.barrier(60)
        except TimeoutError:
            print("timed out waiting for the last deltas", file=sys.stderr)
            return 1
        elapsed = time.perf_counter() - t0
        front = svc.front
        assert front is not None
        problems = [p for r in reqs for p in verify(r, front.requests.get(r.rid), info)]
        for r in reqs[:3]:
            print(f"  {r.rid}: {front.requests[r.rid].text[:70]!r}")
        print(f"{len(reqs)} requests, {tokens} tokens through {shards_text(svc.shards)} in "
              f"{elapsed:.2f}s ({tokens / elapsed:,.0f} tokens/s incl. the client)")
        print(f"exact: {len(reqs) - len({p.split(':')[0] for p in problems})}/{len(reqs)}; "
              f"protocol violations: {len(front.violations)}")
        for p in problems[:10]:
            print("  " + p)
        return 0 if not problems and not front.violations else 1
    finally:
        svc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
