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
  ours/attr      attribution on every request and nothing else (plain rows), what the
                 array path takes on a byte-level tokenizer; `packed` as above; `per-row`:
                 the same requests sent to the per-row path (the rule before issue 17 item
                 4), in the same window; their attributions must be equal
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
from itertools import chain
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from sglang_tok.ring import link
from sglang_tok.shards import table as table_mod
from sglang_tok.shards.paths import row_reason
from sglang_tok.shards.table import RidTable
from tokenizers.decoders import DecodeStream

from sglang_tok import protocol
from sglang_tok.client import decode_frame
from sglang_tok.decoder import make_stream
from sglang_tok.load.workload import PlanSpec, make_requests, schedule
from sglang_tok.testing.local_route import LocalRoute
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
    ap.add_argument("--only", default="",
                    help="comma-separated modes to run (DecodeStream always runs), e.g. "
                         "ours/plain,ours/attr,ours/attr per-row")
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
    attr_opens = [protocol.Open(r.rid, attribution=True) for r in reqs]
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

    attrs: dict[str, dict[str, list]] = {}  # mode -> rid -> attributions, in order

    def run_ours(frames: list[bytes], opens: list[protocol.Open] | None,
                 packed: bool = False, per_row: bool = False,
                 keep: str = "") -> tuple[float, dict]:
        """The shard's table alone: the egress's routing (LocalRoute) is done before the
        clock starts, as it runs in another process. `per_row`: attribution on the
        per-row path, as before issue 17 item 4; `keep`: record attributions as `mode`."""
        table = RidTable(info, 0, max_requests=1 << 20)
        if per_row:
            table_mod.row_reason = _per_row_attribution
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
        kept: list[list] = []
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
            if keep:
                kept.append(out)
        dt = time.perf_counter() - t0
        table_mod.row_reason = row_reason
        for d in chain.from_iterable(kept):  # after the clock
            attrs.setdefault(keep, {}).setdefault(d.rid, []).extend(
                map(tuple, d.attributions or ()))
        for raw in encoded:  # after the clock: the frontend's work
            decoded = decode_frame(raw)
            assert isinstance(decoded, tuple)
            for d in decoded[2]:
                texts_by_rid.setdefault(d.rid, []).append(d.text)
                if keep:
                    attrs.setdefault(keep, {}).setdefault(d.rid, []).extend(
                        map(tuple, d.attributions or ()))
        return dt, texts_by_rid

    modes: dict[str, Any] = {
        "ours/stream": lambda: run_stream(),
        "ours/plain": lambda: run_ours(steps_plain, None),
        "ours/full": lambda: run_ours(steps_full, full_opens),
        "ours/lp+usage": lambda: run_ours(steps_full, array_opens),
        "ours/lp+usage packed": lambda: run_ours(steps_full, array_opens, packed=True),
        "ours/attr": lambda keep="": run_ours(steps_plain, attr_opens, keep=keep),
        "ours/attr packed": lambda keep="": run_ours(steps_plain, attr_opens, packed=True,
                                                     keep=keep),
        "ours/attr per-row": lambda keep="": run_ours(steps_plain, attr_opens, per_row=True,
                                                      keep=keep),
    }
    only = [m for m in args.only.split(",") if m] or list(modes)
    results: dict[str, list[float]] = {"DecodeStream": [], **{m: [] for m in only}}
    got_by: dict[str, dict[str, list[str]]] = {}
    for _ in range(args.repeat):
        results["DecodeStream"].append(total / run_decodestream())
        for m in only:
            attrs.pop(m, None)
            dt, got_by[m] = modes[m]()
            results[m].append(total / dt)
    for m in only:  # the attributions, checked in a run off the clock (keeping every
        if m.startswith("ours/attr"):  # delta alive would make the collector's work count)
            modes[m](m)
    want = {r.rid: tok.decode(r.ids[:-1] if (r.finish or {}).get("matched") ==
                              (r.ids or [None])[-1] else r.ids) for r in reqs}
    bad = {m: sum(1 for r in reqs if "".join(got[r.rid]) != want[r.rid])
           for m, got in got_by.items() if m != "ours/stream"}  # (no stop token trim)
    # attributions: one per id, and the same on every path
    ref = attrs.get("ours/attr per-row")
    for m, by_rid in attrs.items():
        bad[m] += sum(1 for r in reqs if len(by_rid.get(r.rid, [])) != len(r.ids)
                      or (ref is not None and by_rid.get(r.rid) != ref.get(r.rid)))
    base = max(results["DecodeStream"])
    print(f"{'decoder':<20} {f'tokens/s (best of {args.repeat})':>22} {'ratio':>8}")
    for name, vals in results.items():
        print(f"{name:<20} {max(vals):>22,.0f} {max(vals) / base:>7.2f}x")
    print("exactness (text == full decode; attributions one per id, equal to per-row's): " +
          ", ".join(f"{m} {len(reqs) - b}/{len(reqs)}" for m, b in bad.items()))
    return 0 if not any(bad.values()) else 1


def _per_row_attribution(opts: protocol.Open | None, info: TokenizerInfo,
                         array_decoder: bool) -> str | None:
    """The path rule before issue 17 item 4: attribution per row."""
    why = row_reason(opts, info, array_decoder)
    if why is None and opts is not None and opts.attribution:
        return "attribution"
    return why


def _rows(frame: bytes) -> list[tuple[str, list[int]]]:
    b = protocol.decode_batch(frame)
    ids = b.token_ids()
    st = b.tokens.row_starts
    return [(rid, ids[st[i]:st[i + 1]]) for i, rid in enumerate(b.rids)]


if __name__ == "__main__":
    sys.exit(main())
