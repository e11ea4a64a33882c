"""Synthesise a scheduler trace without a GPU: seeded, reproducible, multilingual
(`scripts/load/synth.py`).

Each engine (data-parallel rank) runs its own requests at a target concurrency and emits
one BATCH frame per step, every `step_ms`; engines' frames interleave by time. Texts come
from `faker` (English, Chinese, Japanese, Russian, Arabic, Hindi) plus code, markdown and
emoji, tokenised with the chosen tokenizer.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sglang_tok.kit.workload import BUILTIN_TEXTS, PlanSpec, make_requests, schedule
from sglang_tok.tokenizer import load
from sglang_tok.tracefile import TraceWriter
from sglang_tok_bench.corpora import faker_texts, has_faker
from sglang_tok_bench.figures import span

EXTRA = [
    "```python\nimport asyncio\n\nasync def main() -> None:\n    await asyncio.sleep(0.1)\n```\n",
    "# Heading\n\n- **bold** item\n- `code` item\n\n> quote with a [link](https://example.com)\n",
    "Emoji: 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🙂 ❤️‍🔥 🇯🇵 🧑🏿‍💻",
]


def corpus(seed: int, per_locale: int = 40) -> list[str]:
    if not has_faker():
        print("faker not installed (pip install -e './dev[scripts]'): using built-in texts",
              file=sys.stderr)
        return BUILTIN_TEXTS + EXTRA
    return faker_texts(seed, per_locale, 600) + EXTRA * 10


def synthesise(path: str, spec: PlanSpec, tokenizer: str, step_ms: float,
               top_k: int) -> dict[str, Any]:
    info = load(tokenizer)
    texts = corpus(spec.seed)
    per_engine = []
    for e in range(spec.engines):
        sub = PlanSpec(**{**spec.__dict__, "requests": spec.requests // spec.engines,
                          "seed": spec.seed * 1000 + e})
        reqs = make_requests(info, sub, texts, prefix=f"e{e}")
        per_engine.append(list(schedule(reqs, max(1, spec.concurrency // spec.engines),
                                        sub.seed, top_k)))
    events = []
    for e, steps in enumerate(per_engine):
        offset = e * step_ms / max(1, spec.engines)  # engines step out of phase
        for n, step in enumerate(steps):
            t = (offset + n * step_ms) / 1000
            for f in step.opens:
                events.append((t, 0, f))
            if step.batch is not None:
                events.append((t, 1, step.batch))
            for f in step.ends:
                events.append((t, 2, f))
    events.sort(key=lambda x: (x[0], x[1]))
    w = TraceWriter(path, {"tokenizer": tokenizer, "created": time.time(),
                           "spec": spec.__dict__, "step_ms": step_ms, "top_k": top_k})
    tokens = rows = 0
    for t, _kind, f in events:
        w.write(t, f)
    w.close()
    for steps in per_engine:
        tokens += sum(s.tokens for s in steps)
        rows += sum(s.rows for s in steps)
    return {"frames": w.count, "rows": rows, "tokens": tokens, "requests": spec.requests}


def main(a: argparse.Namespace) -> int:
    """`scripts/load/synth.py`: the trace its flags describe, written to `a.out`."""
    spec = PlanSpec(requests=a.requests, concurrency=a.concurrency,
                    ids_per_row=span(a.ids_per_row), min_tokens=a.min_tokens,
                    max_tokens=a.max_tokens, logprob_share=a.logprob_share, top_k=a.top_k,
                    stop_share=a.stop_share, options_share=a.options_share,
                    special_share=a.special_share, abort_share=a.abort_share,
                    error_share=a.error_share, prompt_share=a.prompt_share,
                    engines=a.engines, seed=a.seed)
    stats = synthesise(a.out, spec, a.tokenizer, a.step_ms, a.top_k)
    print(f"wrote {a.out}: {stats}")
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/load/synth.py` (its `main` parses them)."""
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--min-tokens", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--ids-per-row", default="1", help="k or lo-hi (speculative decoding)")
    ap.add_argument("--logprob-share", type=float, default=0.05)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--stop-share", type=float, default=0.05)
    ap.add_argument("--options-share", type=float, default=0.05)
    ap.add_argument("--special-share", type=float, default=0.05)
    ap.add_argument("--prompt-share", type=float, default=0.2)
    ap.add_argument("--abort-share", type=float, default=0.01)
    ap.add_argument("--error-share", type=float, default=0.0)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
