#!/usr/bin/env python3
"""Decoder micro-benchmark: one core, a multilingual trace of >= 100k tokens.

Compares, in the same run, on the same ids in the same step order:
  DecodeStream   tokenizers.decoders.DecodeStream stepped per id (vLLM v1's detokenizer)
  ours/stream    our incremental decoder (make_stream) pushed per id, like DecodeStream
  ours/plain     a shard's rid table on BATCH frames (frame decode, deltas), default options
  ours/full      the same with stop strings, logprob texts (top-5), attribution and
                 continuous usage on every request (per row: stops and attribution)
  ours/lp+usage  logprob texts (top-5) and continuous usage on every request, what the
                 array path now takes; `packed`: the shard's PACKED output message encoded
                 (logprob values pass through as numbers), the default output
Prints tokens/s of each and the ratios to DecodeStream (ratios, not absolute times: the
machine is shared and noisy). Every output of ours is checked against a full decode.

`--tokenizer llama2-style` measures the window path instead (Metaspace + ByteFallback BPE
trained by scripts/byte_runs.py); `--tokenizer PATH` takes any tokenizer.json. Where
DecodeStream raises on a byte run cut mid-character, that request's stream restarts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok.egress.split import LocalRoute
from sglang_tok.ring import link
from sglang_tok.shards.table import RidTable
from tokenizers.decoders import DecodeStream

from sglang_tok import protocol
from sglang_tok.client import decode_frame
from sglang_tok.decoder import make_stream
from sglang_tok.load.workload import PlanSpec, make_requests, schedule
from sglang_tok.tokenizer import TokenizerInfo, describe, load


def texts() -> list[str]:
    try:
        from faker import Faker
    except ImportError:
        from sglang_tok.load.workload import BUILTIN_TEXTS
        return BUILTIN_TEXTS
    out = []
    for loc in ("en_US", "zh_CN", "ja_JP", "ru_RU", "ar_AA", "hi_IN"):
        f = Faker(loc)
        f.seed_instance(1)
        out += [f.text(max_nb_chars=400) for _ in range(30)]
    return out + ["```python\ndef f(x):\n    return x ** 2  # 🙂\n```", "👩‍👩‍👧‍👦 🏳️‍🌈 ❤️‍🔥"]


def load_info(name: str) -> TokenizerInfo:
    if name == "llama2-style":
        sys.path.insert(0, os.path.dirname(__file__))
        from byte_runs import llama2_style
        return describe(llama2_style(), name)
    return load(name)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=120_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokenizer", default="deepseek-v4",
                    help="deepseek-v4 (byte path), llama2-style (window path) or a path")
    args = ap.parse_args()
    info = load_info(args.tokenizer)
    tok = info.tokenizer
    n = args.tokens // 200
    spec = PlanSpec(requests=n, concurrency=args.concurrency, min_tokens=150, max_tokens=250,
                    seed=2)
    reqs = make_requests(info, spec, texts())
    total = sum(len(r.ids) for r in reqs)
    steps_plain = [s.batch for s in schedule(reqs, args.concurrency, 2) if s.batch]
    # full features: every request OPENs with stops, logprob texts and attribution, and
    # every row carries a logprob with top-5 alternatives
    full_opens = [protocol.Open(r.rid, stop=["<<never>>", "\n\n\n\n"], logprob_text=True,
                                attribution=True, continuous_usage=True) for r in reqs]
    array_opens = [protocol.Open(r.rid, logprob_text=True, continuous_usage=True)
                   for r in reqs]
    for r in reqs:
        r.logprobs = True
    steps_full = [s.batch for s in schedule(reqs, args.concurrency, 2, top_k=5) if s.batch]
    order = [[rid_ids for rid_ids in _rows(b)] for b in steps_plain]
    print(f"trace: {info.name}, {len(reqs)} requests, {total} tokens, {len(steps_plain)} "
          f"frames, concurrency {args.concurrency}")

    def run_decodestream() -> float:
        streams: dict[str, DecodeStream] = {}
        t0 = time.perf_counter()
        for rows in order:
            for rid, ids in rows:
                ds = streams.get(rid)
                if ds is None:
                    ds = streams[rid] = DecodeStream(skip_special_tokens=True)
                try:
                    for i in ids:
                        ds.step(tok, i)
                except Exception:
                    streams[rid] = DecodeStream(skip_special_tokens=True)
        return time.perf_counter() - t0

    def run_stream() -> tuple[float, dict[str, list[str]]]:
        streams: dict = {}
        got: dict[str, list[str]] = {}
        t0 = time.perf_counter()
        for rows in order:
            for rid, ids in rows:
                st = streams.get(rid)
                if st is None:
                    st = streams[rid] = make_stream(info, True)
                    got[rid] = []
                push, parts = st.push, got[rid]
                for i in ids:
                    parts.append(push([i]))
        return time.perf_counter() - t0, got

    def run_ours(frames: list[bytes], opens: list[protocol.Open] | None,
                 packed: bool = False) -> tuple[float, dict]:
        """The shard's table alone: the egress's routing (LocalRoute) is done before the
        clock starts, as it runs in another process."""
        table = RidTable(info, 0, max_requests=1 << 20)
        route = LocalRoute(1)
        for o in opens or ():
            route.open(o.rid)
        msgs = []
        for f in frames:
            for raw in route(protocol.decode_batch(f)).values():
                msg = link.parse(raw)
                assert isinstance(msg, link.Arrays)
                msgs.append(msg)
        out: list = []
        texts_by_rid: dict[str, list[str]] = {}
        encoded: list[bytes] = []
        t0 = time.perf_counter()
        if opens:
            for o in opens:
                table.on_open(o, out)
        for msg in msgs:
            if packed:
                sink = protocol.PackedOut()
                table.on_arrays(msg, sink)
                encoded.append(protocol.encode_output("packed", 0, 0, sink))
                continue
            out = []
            table.on_arrays(msg, out)
            for d in out:
                texts_by_rid.setdefault(d.rid, []).append(d.text)
        dt = time.perf_counter() - t0
        for raw in encoded:  # after the clock: the frontend's work
            decoded = decode_frame(raw)
            assert isinstance(decoded, tuple)
            for d in decoded[2]:
                texts_by_rid.setdefault(d.rid, []).append(d.text)
        return dt, texts_by_rid

    results: dict[str, list[float]] = {"DecodeStream": [], "ours/stream": [], "ours/plain": [],
                                       "ours/full": [], "ours/lp+usage": [],
                                       "ours/lp+usage packed": []}
    for _ in range(args.repeat):
        results["DecodeStream"].append(total / run_decodestream())
        dt, _ = run_stream()
        results["ours/stream"].append(total / dt)
        dt, got = run_ours(steps_plain, None)
        results["ours/plain"].append(total / dt)
        dt2, got_full = run_ours(steps_full, full_opens)
        results["ours/full"].append(total / dt2)
        dt3, got_array = run_ours(steps_full, array_opens)
        results["ours/lp+usage"].append(total / dt3)
        dt4, got_packed = run_ours(steps_full, array_opens, packed=True)
        results["ours/lp+usage packed"].append(total / dt4)
    bad = sum(1 for r in reqs if "".join(got[r.rid]) != tok.decode(
        r.ids[:-1] if (r.finish or {}).get("matched") == (r.ids or [None])[-1] else r.ids))
    bad_full = sum(1 for r in reqs if "".join(got_full[r.rid]) != "".join(got[r.rid])
                   or "".join(got_array[r.rid]) != "".join(got[r.rid])
                   or "".join(got_packed[r.rid]) != "".join(got[r.rid]))
    base = max(results["DecodeStream"])
    print(f"{'decoder':<20} {f'tokens/s (best of {args.repeat})':>22} {'ratio':>8}")
    for name, vals in results.items():
        print(f"{name:<20} {max(vals):>22,.0f} {max(vals) / base:>7.2f}x")
    print(f"exactness: ours/plain {len(reqs) - bad}/{len(reqs)} exact; "
          f"ours/full and ours/lp+usage (both) == ours/plain text for {len(reqs) - bad_full}/"
          f"{len(reqs)}")
    return 0 if not bad and not bad_full else 1


def _rows(frame: bytes) -> list[tuple[str, list[int]]]:
    b = protocol.decode_batch(frame)
    ids = b.token_ids()
    st = b.tokens.row_starts
    return [(rid, ids[st[i]:st[i + 1]]) for i, rid in enumerate(b.rids)]


if __name__ == "__main__":
    sys.exit(main())
