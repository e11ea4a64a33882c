"""Decoder micro-benchmark: one core, a multilingual trace of >= 100k tokens
(`scripts/bench/decoder.py`).

Compares, in the same run, on the same ids in the same step order:
  DecodeStream   tokenizers.decoders.DecodeStream stepped per id (vLLM v1's detokenizer)
  ours/stream    a shard's decoder (its per-row `push`, a slot per request) per id, like
                 DecodeStream
  ours/plain     a shard's rid table on BATCH frames (frame decode, deltas), default options
  ours/full      the same with stop strings, logprob texts (top-5), attribution and
                 continuous usage on every request (per row: stops and attribution)
  ours/lp+usage  logprob texts (top-5) and continuous usage on every request, what the
                 array path takes; `packed`: the shard's PACKED output message encoded
                 (logprob values pass through as numbers), the default output
  ours/attr      attribution on every request and nothing else (plain rows), what the
                 array path takes on a byte-level tokenizer; `packed` as above; `per-row`:
                 the same requests sent to the per-row path (attribution as a per-row
                 reason), in the same window; their attributions must be equal
Prints tokens/s of each and the ratios to DecodeStream (ratios, not absolute times: the
machine is shared and noisy). Every output of ours is checked against a full decode.

`--tokenizer llama2-style` measures the byte-fallback decoders instead (Metaspace +
ByteFallback BPE trained as `scripts/bench/fallback.py --section runs` trains it); `--tokenizer
PATH` takes any tokenizer.json. Where DecodeStream raises on a byte run cut mid-character,
that request's stream restarts.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from sglang_tok.finish import Stop
from sglang_tok.kit.client import decode_frame
from sglang_tok.kit.workload import PlannedRequest, PlanSpec, make_requests, schedule
from sglang_tok.protocols.model import batch, control, output
from sglang_tok.protocols.model import packed as native_packed
from sglang_tok.protocols.model.deltas import DeltasOut
from sglang_tok.tokenizer import TokenizerInfo, describe, load
from sglang_tok_bench.corpora import llama2_style, multilingual
from sglang_tok_bench.figures import ratio_table
from sglang_tok_bench.frame_rows import batch_rows, decodestream_rows, route_arrays
from shards.decoders import decoders_for
from shards.decoding.slots import Slots
from shards.messages.paths import row_reason
from shards.messages.table import RidTable


def load_info(name: str) -> TokenizerInfo:
    if name == "llama2-style":
        return describe(llama2_style(), name)
    return load(name)


Rows = list[tuple[str, list[int]]]
# mode -> rid -> attributions, in order
Attributions = dict[str, dict[str, list[tuple[Any, ...]]]]


@dataclass
class Workload:
    """The requests, their frames (plain, and with top-5 logprobs on every row), each
    frame's rows, and the OPENs of each feature set."""

    info: TokenizerInfo
    reqs: list[PlannedRequest]
    plain: list[bytes]
    full: list[bytes]
    order: list[Rows]
    opens: dict[str, list[control.Open]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(len(r.ids) for r in self.reqs)


def workload(info: TokenizerInfo, tokens: int, concurrency: int) -> Workload:
    spec = PlanSpec(requests=tokens // 200, concurrency=concurrency, min_tokens=150,
                    max_tokens=250, seed=2)
    reqs = make_requests(info, spec, multilingual())
    plain = [s.batch for s in schedule(reqs, concurrency, 2) if s.batch]
    for r in reqs:  # every row carries a logprob with top-5 alternatives
        r.logprobs = True
    full = [s.batch for s in schedule(reqs, concurrency, 2, top_k=5) if s.batch]
    w = Workload(info, reqs, plain, full, [batch_rows(b) for b in plain])
    w.opens = {
        # full features: stops, logprob texts and attribution on every request
        "full": [control.Open(r.rid, stop=["<<never>>", "\n\n\n\n"], logprob_text=True,
                               attribution=True, continuous_usage=True) for r in reqs],
        "array": [control.Open(r.rid, logprob_text=True, continuous_usage=True)
                  for r in reqs],
        "attr": [control.Open(r.rid, attribution=True) for r in reqs]}
    return w


def run_decodestream(w: Workload) -> float:
    t0 = time.perf_counter()
    decodestream_rows(w.info.tokenizer, w.order)
    return time.perf_counter() - t0


def run_stream(w: Workload) -> tuple[float, dict[str, list[str]]]:
    slots: dict[str, int] = {}
    got: dict[str, list[str]] = {}
    dec = decoders_for(w.info).per_row
    state = Slots(len(w.reqs))
    t0 = time.perf_counter()
    push = dec.push
    for rows in w.order:
        for rid, ids in rows:
            slot = slots.get(rid)
            if slot is None:
                slot = slots[rid] = len(slots)
                state.bind_plain(slot, rid, dec.start(control.Open(rid)), 0, 0, 0)
                got[rid] = []
            parts = got[rid]
            for i in ids:
                parts.append(push(state, slot, [i]))
    return time.perf_counter() - t0, got


def collect(attrs: Attributions, keep: str, deltas: Any) -> None:
    for d in deltas:
        attrs.setdefault(keep, {}).setdefault(d.rid, []).extend(
            map(tuple, d.attributions or ()))


def run_ours(w: Workload, frames: list[bytes], opens: list[control.Open] | None,
             attrs: Attributions, packed: bool = False, per_row: bool = False,
             keep: str = "") -> tuple[float, dict[str, list[str]]]:
    """The shard's table alone: the egress's routing is done before the clock starts, as
    it runs in another process. `per_row`: attribution on the per-row path; `keep`: record
    attributions as `mode`."""
    table = RidTable(w.info, 0, max_requests=1 << 20,
                     path_rule=_per_row_attribution if per_row else row_reason)
    msgs = route_arrays([batch.decode_batch(f) for f in frames],
                        [o.rid for o in opens or ()])
    out: Any = DeltasOut()
    texts_by_rid: dict[str, list[str]] = {}
    encoded: list[bytes] = []
    kept: list[list[Any]] = []
    t0 = time.perf_counter()
    for o in opens or ():
        table.on_open(o, out)
    for msg in msgs:
        if packed:
            sink = native_packed.PackedOut()
            table.on_arrays(msg, sink)
            encoded.append(output.encode_output("packed", 0, 0, sink))
            continue
        out = DeltasOut()
        table.on_arrays(msg, out)
        for d in out:
            texts_by_rid.setdefault(d.rid, []).append(d.text)
        if keep:
            kept.append(out)
    dt = time.perf_counter() - t0
    if keep:  # after the clock
        collect(attrs, keep, chain.from_iterable(kept))
    for raw in encoded:  # after the clock: the frontend's work
        decoded = decode_frame(raw)
        assert isinstance(decoded, tuple)
        for d in decoded[2]:
            texts_by_rid.setdefault(d.rid, []).append(d.text)
        if keep:
            collect(attrs, keep, decoded[2])
    return dt, texts_by_rid


Mode = Callable[..., tuple[float, dict[str, list[str]]]]


def modes(w: Workload, attrs: Attributions) -> dict[str, Mode]:
    plain, full, o = w.plain, w.full, w.opens
    return {
        "ours/stream": lambda: run_stream(w),
        "ours/plain": lambda: run_ours(w, plain, None, attrs),
        "ours/full": lambda: run_ours(w, full, o["full"], attrs),
        "ours/lp+usage": lambda: run_ours(w, full, o["array"], attrs),
        "ours/lp+usage packed": lambda: run_ours(w, full, o["array"], attrs, packed=True),
        "ours/attr": lambda keep="": run_ours(w, plain, o["attr"], attrs, keep=keep),
        "ours/attr packed": lambda keep="": run_ours(w, plain, o["attr"], attrs, packed=True,
                                                     keep=keep),
        "ours/attr per-row": lambda keep="": run_ours(w, plain, o["attr"], attrs,
                                                      per_row=True, keep=keep),
    }


def exactness(w: Workload, got_by: dict[str, dict[str, list[str]]],
              attrs: Attributions) -> dict[str, int]:
    """Per mode, the requests whose text is not the full decode (a stop token that ended a
    request left out), or whose attributions are not one per id, equal to per-row's."""
    tok, reqs = w.info.tokenizer, w.reqs
    want = {r.rid: tok.decode(r.ids[:-1] if r.ids and isinstance(r.finish, Stop) and
                              r.finish.matched == r.ids[-1] else r.ids) for r in reqs}
    bad = {m: sum(1 for r in reqs if "".join(got[r.rid]) != want[r.rid])
           for m, got in got_by.items() if m != "ours/stream"}  # (no stop token trim)
    ref = attrs.get("ours/attr per-row")
    for m, by_rid in attrs.items():
        bad[m] += sum(1 for r in reqs if len(by_rid.get(r.rid, [])) != len(r.ids)
                      or (ref is not None and by_rid.get(r.rid) != ref.get(r.rid)))
    return bad


def main(args: argparse.Namespace) -> int:
    """`scripts/bench/decoder.py`: every mode, interleaved rounds, the table, exactness."""
    w = workload(load_info(args.tokenizer), args.tokens, args.concurrency)
    print(f"trace: {w.info.name}, {len(w.reqs)} requests, {w.total} tokens, {len(w.plain)} "
          f"frames, concurrency {args.concurrency}")
    attrs: Attributions = {}
    all_modes = modes(w, attrs)
    only = [m for m in args.only.split(",") if m] or list(all_modes)
    results: dict[str, list[float]] = {"DecodeStream": [], **{m: [] for m in only}}
    got_by: dict[str, dict[str, list[str]]] = {}
    for _ in range(args.repeat):  # interleaved: every mode in every round
        results["DecodeStream"].append(w.total / run_decodestream(w))
        for m in only:
            attrs.pop(m, None)
            dt, got_by[m] = all_modes[m]()
            results[m].append(w.total / dt)
    for m in only:  # the attributions, checked in a run off the clock (keeping every
        if m.startswith("ours/attr"):  # delta alive would make the collector's work count)
            all_modes[m](m)
    bad = exactness(w, got_by, attrs)
    print(ratio_table({name: max(vals) for name, vals in results.items()}, "DecodeStream",
                      ("decoder", f"tokens/s (best of {args.repeat})")))
    print("exactness (text == full decode; attributions one per id, equal to per-row's): " +
          ", ".join(f"{m} {len(w.reqs) - b}/{len(w.reqs)}" for m, b in bad.items()))
    return 0 if not any(bad.values()) else 1


def _per_row_attribution(opts: control.Open | None, info: TokenizerInfo,
                         array_decoder: bool) -> str | None:
    """The path rule with attribution as a per-row reason."""
    why = row_reason(opts, info, array_decoder)
    if why is None and opts is not None and opts.attribution:
        return "attribution"
    return why


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/decoder.py` (its `main` parses them)."""
    ap.add_argument("--tokens", type=int, default=120_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokenizer", default="deepseek-v4",
                    help="deepseek-v4 (byte-level), llama2-style (byte fallback) or a path")
    ap.add_argument("--only", default="",
                    help="comma-separated modes to run (DecodeStream always runs), e.g. "
                         "ours/plain,ours/attr,ours/attr per-row")
