#!/usr/bin/env python3
"""Byte-fallback tokenizers (Llama-2 / Mistral / Gemma style): what the service costs and
holds back on them, in two sections.

--section rows (the default): cost per row of the array decoder
(`shards/byte_fallback/rows.py`), its plain-Python loop, the window family's decoder
(`shards/window/decoder.py`, which decodes any chain through `tokenizers` itself) and one
`tokenizers` DecodeStream.step, side by side in one run. A message holds R rows of distinct
slots (R = 16, 256, 1024 by default), each row --ids-per-row ids of its own request, the
requests being multilingual text with emoji and rare characters (so byte runs open and
close, some across rows). Each decoder walks the same messages; the array decoder and the
loop carry their per-slot state in arrays (the gather before and the write-back after each
message are timed with them, as a shard pays them). CPU time of this thread, best of
--repeat interleaved runs (the machine is shared). Every row's text is checked against
the window decoder's before timing.

--section runs: a Llama-2-style tokenizer trained on multilingual faker text decodes
held-out multilingual requests with emoji (U+FE0F, ZWJ and skin tone sequences), rare CJK
and rare scripts, cut at random lengths (so runs end mid-character; a quarter also lose
one continuation byte inside a run, as a model may), for the current code and optionally
for a git revision side by side (`--baseline REV`):
  anchored    ids whose attribution differs from the per-character oracle
  behind      rows (one id per row, and 1-4 ids per row) after which the service's text is
              shorter than DecodeStream's, split by whether the row ends inside a byte run
  stop hold   requests with stop strings (1-4 ids per row) whose sent text was ever behind
              the decoder's final text by more than max(len(stop)) - 1 characters (rule 3)
  cost        microseconds per id: DecodeStream.step, a per-row request's decoding (1 and
              1-4 ids per row) and attributed rows (Request.row with attribution)

    python scripts/bench_fallback.py --repeat 3
    python scripts/bench_fallback.py --tokenizer path/to/llama2/tokenizer.json
    python scripts/bench_fallback.py --section runs --baseline HEAD~1
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from tokenizers.decoders import DecodeStream

from sglang_tok.harness import zoo
from sglang_tok.harness.bench.corpora import LOCALES_LLAMA2, faker_texts, llama2_style
from sglang_tok.harness.bench.figures import markdown, markdown_row
from sglang_tok.harness.bench.processes import workdir
from sglang_tok.harness.bench.timing import interleaved, timed
from sglang_tok.harness.oracles import byte_values, oracle_anchors, to_bytes
from sglang_tok.protocols.native.control import Open
from sglang_tok.ragged import ragged_index
from sglang_tok.tokenizer import TokenizerInfo, describe, load
from shards.byte_fallback.rows import decode_rows_fallback, decode_rows_loop
from shards.byte_fallback.table import FallbackTable, fallback_table
from shards.decoding.slots import Slots
from shards.window.decoder import WindowDecoder

ROOT = Path(__file__).resolve().parent.parent

# ====================================================================== section rows
EXTRAS = ["🚶\ufe0f ", "👩\u200d👩\u200d👧\u200d👦", " 🏳\ufe0f\u200d🌈", "👍🏽", "❤\ufe0f", " 😀",
          "𠀋", " 𪚥龘鱻", "ᚠᛇᚻ", "ሰላም", " ᏣᎳᎩ"]


def workload(name: str) -> list[str]:
    """latin: English, code and markdown, one emoji now and then; multilingual: every corpus
    line (CJK, Thai, Arabic, emoji sequences) and rare characters outside the vocabulary."""
    if name == "latin":
        return [zoo.CORPUS[i] for i in (0, 1, 5, 6)] * 25 + ["🙂"]
    return zoo.CORPUS + EXTRAS


def requests(info: TokenizerInfo, texts: list[str], n: int, length: int,
             seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        parts = [texts[k] for k in rng.integers(0, len(texts), 40)]
        ids = info.tokenizer.encode(" ".join(parts), add_special_tokens=False).ids
        start = int(rng.integers(0, max(1, len(ids) - length)))
        out.append(ids[start:start + length])
    return out


def llama2_small() -> Tokenizer:
    """The zoo's Llama-2 pipeline with the corpus's whole alphabet (as Llama-2 has every
    common character): byte runs come from emoji and rare characters only."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()  # pieces end at "▁", as SentencePiece's
    tok.decoder = zoo.sentencepiece_decoder()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=zoo.SPECIALS,
                                  show_progress=False)
    tok.train_from_iterator(zoo.CORPUS * 20, trainer)
    return zoo.with_byte_tokens(tok)


class ArrayState:
    """Per-slot state as a shard keeps it: open runs (width grows), flags, skip."""

    def __init__(self, slots: int) -> None:
        self.runs = np.zeros((slots, 8), np.uint8)
        self.run_len = np.zeros(slots, np.int64)
        self.started = np.zeros(slots, bool)
        self.skip = np.zeros(slots, np.int64)

    def step(self, fn: Callable[..., Any], tab: FallbackTable, slots: np.ndarray,
             ids: np.ndarray, starts: np.ndarray, sel: np.ndarray) -> list[str] | None:
        d = fn(tab, ids, starts, sel, self.runs[slots], self.run_len[slots],
               self.started[slots], self.skip[slots])
        held = d.held
        self.run_len[slots] = held
        self.started[slots] = d.started
        self.skip[slots] = d.skip
        if len(d.held_data):
            width = self.runs.shape[1]
            top = int(held.max())
            if top > width:
                grown = np.zeros((len(self.runs), max(top, 2 * width)), np.uint8)
                grown[:, :width] = self.runs
                self.runs, width = grown, grown.shape[1]
            rows = np.flatnonzero(held)
            dest = ragged_index(slots[rows] * width, held[rows])
            self.runs.reshape(-1)[dest] = d.held_data
        parts: list[str] | None = d.parts
        return parts


Message = tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]


def messages(reqs: list[list[int]], rows: int, per_row: int) -> list[Message]:
    """Messages of `rows` distinct slots, `per_row` ids each, until the requests run out."""
    out = []
    length = min(map(len, reqs))
    slots = np.arange(rows, dtype=np.int64)
    for at in range(0, length - per_row + 1, per_row):
        row_ids = [r[at:at + per_row] for r in reqs[:rows]]
        flat = np.array([x for r in row_ids for x in r], np.int64)
        starts = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
        out.append((slots, flat, starts, row_ids))
    return out


def windows(info: TokenizerInfo, rows: int, skip: bool) -> tuple[WindowDecoder, Slots]:
    """The window family's decoder and `rows` slots of fresh requests."""
    dec, state = WindowDecoder(info), Slots(rows)
    start = Open("r", skip_special_tokens=skip)
    for slot in range(rows):
        state.bind_plain(slot, "r", dec.start(start), 0, 0, 0)
    return dec, state


def check_rows(info: TokenizerInfo, tab: FallbackTable, msgs: list[Message], rows: int,
               sel: np.ndarray, skip: bool) -> None:
    """Every row of both array-state decoders against the window decoder's text."""
    window, ws = windows(info, rows, skip)
    state_a, state_l = ArrayState(rows), ArrayState(rows)
    for slots, flat, starts, row_ids in msgs:
        want = [window.push(ws, slot, r) for slot, r in enumerate(row_ids)]
        got = state_l.step(decode_rows_loop, tab, slots, flat, starts, sel)
        assert got == want
        d = decode_rows_fallback(tab, flat, starts, sel, state_a.runs[slots],
                                 state_a.run_len[slots], state_a.started[slots],
                                 state_a.skip[slots])
        assert [d.text[d.chars[j]:d.chars[j + 1]] for j in range(rows)] == want
        state_a.step(decode_rows_fallback, tab, slots, flat, starts, sel)


def row_cases(info: TokenizerInfo, tab: FallbackTable, msgs: list[Message], rows: int,
              sel: np.ndarray, skip: bool) -> dict[str, Callable[[], object]]:
    """The four decoders, each over every message from a fresh state."""
    def run_array(fn: Callable[..., Any]) -> None:
        state = ArrayState(rows)
        for slots, flat, starts, _ in msgs:
            state.step(fn, tab, slots, flat, starts, sel)

    def run_window() -> None:
        window, state = windows(info, rows, skip)
        push = window.push
        for *_, row_ids in msgs:
            for slot, r in enumerate(row_ids):
                push(state, slot, r)

    def run_decode_stream() -> None:
        tok = info.tokenizer
        streams = [DecodeStream(skip_special_tokens=skip) for _ in range(rows)]
        for *_, row_ids in msgs:
            for ds, r in zip(streams, row_ids):
                for x in r:
                    ds.step(tok, x)

    return {"array": lambda: run_array(decode_rows_fallback),
            "loop": lambda: run_array(decode_rows_loop), "window": run_window,
            "DecodeStream": run_decode_stream}


def measure_rows(info: TokenizerInfo, tab: FallbackTable, wl: str, rows: int,
                 args: argparse.Namespace) -> list[str]:
    skip = args.skip_special
    msgs = messages(requests(info, workload(wl), rows, args.length, seed=rows), rows,
                    args.ids_per_row)
    nrows = len(msgs) * rows
    share = np.isin(np.concatenate([m[1] for m in msgs]),
                    np.array(sorted(info.byte_fallback_ids))).mean()
    sel = np.full(rows, int(skip), np.int64)
    check_rows(info, tab, msgs, rows, sel, skip)
    cases = row_cases(info, tab, msgs, rows, sel, skip)
    t = {k: min(v) / nrows for k, v in interleaved(
        {k: timed(fn, time.thread_time) for k, fn in cases.items()}, args.repeat).items()}
    t_ds = t["DecodeStream"] / args.ids_per_row  # per id
    return [wl, str(rows), f"{share:.1%}", *(f"{t[k] * 1e6:.3f}" for k in ("array", "loop",
            "window")), f"{t_ds * 1e6:.3f}", f"{t['array'] / t['window']:.3f}x",
            f"{t['loop'] / t['window']:.3f}x", f"{t['array'] / t['DecodeStream']:.3f}x"]


def section_rows(args: argparse.Namespace) -> None:
    info = (load(args.tokenizer) if args.tokenizer
            else describe(llama2_small(), "trained-llama2-style"))
    tab = fallback_table(info)
    assert tab is not None, "not a Metaspace + ByteFallback tokenizer"
    print(f"tokenizer {info.name}: vocab {info.vocab_size}, {args.ids_per_row} id(s) per row, "
          f"best of {args.repeat} interleaved (thread CPU)")
    head = ["workload", "rows/msg", "byte ids", "array us/row", "loop us/row",
            "window us/row", "DecodeStream.step us/id", "array / Window", "loop / Window",
            "array / DecodeStream"]
    print(markdown(head, []))
    for wl, rows in [(w, r) for w in args.workload for r in args.rows]:
        print(markdown_row(measure_rows(info, tab, wl, rows, args)), flush=True)


# ====================================================================== section runs
# sequences a Llama-2 vocabulary mostly has no token for: they decode through byte runs
RUN_EXTRAS = ["🚶\ufe0f", "👩\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "👍🏽", "❤\ufe0f", "😀",
              "🙂", "🤖", "🧑🏾\u200d💻", "✔\ufe0f", "🇯🇵", "❤\ufe0f\u200d🔥", "𠀋", "𪚥", "龘",
              "鱻", "ᚠᛇᚻ", "𓀀𓁐", "ꦗꦮ", "ⵜⴰⵎⴰⵣⵉⵖⵜ", "ᏣᎳᎩ", "ሰላም", "ᠮᠣᠩᠭᠣᠯ", "\n", "情 ",
              "。\n\n"]
STOPS = ["<|stop|>", "。\n\n\n", "STOP!!"]
LENGTH = {"type": "length", "length": 1}


def eval_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    base = faker_texts(seed, max(1, n // len(LOCALES_LLAMA2) + 1), 300, LOCALES_LLAMA2)
    rng.shuffle(base)
    out = []
    for t in base[:n]:
        words = t.split(" ") if " " in t else [t[i:i + 8] for i in range(0, len(t), 8)]
        for _ in range(rng.randint(2, 6)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(RUN_EXTRAS))
        out.append(" ".join(words))
    return out


def eval_requests(tok: Tokenizer, n: int, byte_of: dict[int, int]) -> list[list[int]]:
    """The held-out texts' ids, cut at a random length; a quarter lose one continuation
    byte inside a run (a model that stops a character half way, then goes on)."""
    rng = random.Random(11)
    reqs = []
    for t in eval_texts(n):
        ids = tok.encode(t, add_special_tokens=False).ids
        ids = ids[:rng.randint(max(1, len(ids) // 3), len(ids))]
        if rng.random() < 0.25:
            mid = [j for j in range(1, len(ids) - 1) if ids[j] in byte_of
                   and byte_of[ids[j]] & 0xC0 == 0x80]
            if mid:
                del ids[rng.choice(mid)]
        reqs.append(ids)
    return reqs


def baseline_package(rev: str) -> ModuleType:
    """The sglang_tok package as of `rev`, importable beside the current one."""
    tmp = workdir("bench_fallback_")  # imported from it until the process ends
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "sglang_tok"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=tar, check=True)
    (tmp / "sglang_tok").rename(tmp / "sglang_tok_base")
    sys.path.insert(0, str(tmp))
    return importlib.import_module("sglang_tok_base")


class Impl:
    def __init__(self, name: str, pkg: str, tok: Tokenizer) -> None:
        self.name = name
        self.tokenizer = importlib.import_module(f"{pkg}.tokenizer")
        # the per-row path: the top-level shards/messages/ now; sglang_tok/shards/ or
        # sglang_tok/ in a baseline from before (a baseline is its sglang_tok/ alone:
        # `baseline_package`)
        self.request = importlib.import_module(
            "shards.messages.request" if pkg == "sglang_tok" else
            f"{pkg}.shards.messages.request" if importlib.util.find_spec(f"{pkg}.shards") else
            f"{pkg}.request")
        # a baseline from before the one decoder interface has the per-row streams
        self.decoder = importlib.import_module(f"{pkg}.decoder") \
            if importlib.util.find_spec(f"{pkg}.decoder") else None
        # OPEN: protocols/native/ now, protocol.py before
        self.open = importlib.import_module(
            f"{pkg}.protocols.native.control" if importlib.util.find_spec(f"{pkg}.protocols")
            else f"{pkg}.protocol").Open
        self.info = self.tokenizer.describe(tok, "llama2-style")

    def req(self, **opts: Any) -> Any:
        return self.request.Request("r", self.info, self.open("r", **opts))

    def pusher(self) -> Callable[[list[int]], str]:
        """A fresh request's rows, decoded alone (no per-row rules), skipping specials."""
        if self.decoder is not None:
            return self.decoder.make_stream(self.info, True).push  # type: ignore[no-any-return]
        req = self.req()  # its decoder, on its slot
        dec, state, slot = req.decoder, req.state, req.slot
        return lambda ids: dec.push(state, slot, ids)  # type: ignore[no-any-return]


def rows_of(ids: list[int], rng: random.Random, hi: int) -> list[list[int]]:
    out, i = [], 0
    while i < len(ids):
        k = rng.randint(1, hi)
        out.append(ids[i:i + k])
        i += k
    return out


def final_chars(tok: Tokenizer, ids: list[int], k: int, byte_ids: set[int] | frozenset[int]
                ) -> int:
    """Characters of the decoder's final text after the first k ids: it ends where the
    open byte run begins."""
    s = k
    while s > 0 and ids[s - 1] in byte_ids:
        s -= 1
    return len(tok.decode(ids[:s])) if s else 0


def measure_anchored(impl: Impl, tok: Tokenizer, reqs: list[list[int]],
                     byte_of: dict[int, int]) -> tuple[int, int, int]:
    bad_ids = bad_reqs = total = 0
    special = impl.info.special_ids
    for ids in reqs:
        r = impl.req(attribution=True)
        got, sent = [], 0
        for n, row in enumerate(ids):
            d = r.row([row], LENGTH if n == len(ids) - 1 else None, 1, 0, 0)
            got += [(t, k, sent + off) for t, k, off in d.attributions or []]
            sent += len(d.text.encode("utf-8"))
        text, want = oracle_anchors(tok, ids, True, special, byte_of)
        want = to_bytes(text, want)
        bad = sum(1 for a, b in zip(got, want) if a != b) + abs(len(got) - len(want))
        bad_ids += bad
        bad_reqs += bad > 0
        total += len(ids)
    return bad_ids, bad_reqs, total


def step_decodestream(ds: DecodeStream, tok: Tokenizer, row: list[int]) -> str | None:
    """DecodeStream's text for one row's ids; None where it raises."""
    out = ""
    try:
        for i in row:
            out += ds.step(tok, i) or ""
    except Exception:
        return None
    return out


def measure_behind(impl: Impl, tok: Tokenizer, reqs: list[list[int]], hi: int,
                   seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    byte_ids = impl.info.byte_fallback_ids
    c = dict.fromkeys(("rows", "inside", "inside_chars", "outside", "outside_chars",
                       "ds_failed", "ds_diverged", "ours_exact"), 0)
    for ids in reqs:
        r = impl.req()
        ds = DecodeStream(skip_special_tokens=True)
        ours, theirs, ds_ok, k = "", "", True, 0
        rows = rows_of(ids, rng, hi)
        for n, row in enumerate(rows):
            ours += r.row(row, LENGTH if n == len(rows) - 1 else None, 1, 0, 0).text
            if ds_ok:
                piece = step_decodestream(ds, tok, row)
                ds_ok = piece is not None
                theirs += piece or ""
                c["ds_failed"] += not ds_ok
            if n == len(rows) - 1 or not ds_ok:
                continue
            c["rows"] += 1
            k += len(row)
            if len(ours) >= len(theirs):
                continue
            # text before the open byte run is final: being behind there is not a hold
            final = min(len(theirs), final_chars(tok, ids, k, byte_ids))
            inside = len(ours) >= final
            c["inside" if inside else "outside"] += 1
            c["inside_chars" if inside else "outside_chars"] += (
                len(theirs) - len(ours) if inside else final - len(ours))
        full = tok.decode(ids)
        c["ours_exact"] += ours == full
        c["ds_diverged"] += ds_ok and theirs != full
    return c


def measure_stop_hold(impl: Impl, tok: Tokenizer, reqs: list[list[int]], hi: int,
                      seed: int) -> tuple[int, int, int]:
    """Requests (and rows) whose sent text fell more than rule 3 behind the final text."""
    rng = random.Random(seed)
    byte_ids = impl.info.byte_fallback_ids
    allow = max(map(len, STOPS)) - 1
    bad_reqs = bad_rows = 0
    for ids in reqs:
        r = impl.req(stop=STOPS)
        sent, k, bad = 0, 0, 0
        for row in rows_of(ids, rng, hi):
            d = r.row(row, None, 1, 0, 0)
            if d.finish is not None:
                break
            sent += len(d.text)
            k += len(row)
            bad += sent < final_chars(tok, ids, k, byte_ids) - allow
        bad_rows += bad
        bad_reqs += bad > 0
    return bad_reqs, bad_rows, len(reqs)


def cost_runs(impl: Impl, tok: Tokenizer, reqs: list[list[int]]) -> dict[str, Callable[[], None]]:
    """The timed loops, per id: DecodeStream, a request's decoding, attributed rows."""
    rng = random.Random(3)
    multi = [rows_of(ids, rng, 4) for ids in reqs]

    def ds() -> None:
        for ids in reqs:
            d = DecodeStream(skip_special_tokens=True)
            for i in ids:
                d.step(tok, i)

    def one() -> None:
        for ids in reqs:
            push = impl.pusher()
            for i in ids:
                push([i])

    def several() -> None:
        for rows in multi:
            push = impl.pusher()
            for row in rows:
                push(row)

    def attributed() -> None:
        for ids in reqs:
            row = impl.req(attribution=True).row
            for i in ids:
                row([i], None, 1, 0, 0)

    return {"DecodeStream": ds, "decode 1/row": one, "decode 1-4/row": several,
            "attributed 1/row": attributed}


def measure_cost(impls: list[Impl], tok: Tokenizer, reqs: list[list[int]], repeat: int
                 ) -> list[dict[str, float]]:
    """Best time per id (us) of each loop, implementations interleaved in every round."""
    reqs = [ids for ids in reqs if step_decodestream(  # it raises on the others
        DecodeStream(skip_special_tokens=True), tok, ids) is not None]
    n = sum(len(ids) for ids in reqs)
    loops = [cost_runs(impl, tok, reqs) for impl in impls]
    cases = {(name, k): timed(lp[name]) for name in loops[0] for k, lp in enumerate(loops)}
    got = interleaved(cases, repeat)
    return [{name: min(got[name, k]) / n * 1e6 for name in lp} for k, lp in enumerate(loops)]


def report_runs(impl: Impl, tok: Tokenizer, reqs: list[list[int]],
                byte_of: dict[int, int]) -> None:
    print(f"== {impl.name}")
    bad_ids, bad_reqs, total = measure_anchored(impl, tok, reqs, byte_of)
    print(f"anchored != oracle: {bad_ids} of {total} ids, in {bad_reqs} of {len(reqs)} "
          "requests")
    for hi in (1, 4):
        c = measure_behind(impl, tok, reqs, hi, seed=5)
        print(f"behind DecodeStream, 1-{hi} ids/row: {c['outside']} rows outside runs "
              f"({c['outside_chars']} chars), {c['inside']} inside runs "
              f"({c['inside_chars']} chars) of {c['rows']} rows; DecodeStream failed on "
              f"{c['ds_failed']}, diverged on {c['ds_diverged']}; ours exact "
              f"{c['ours_exact']}/{len(reqs)}")
    bad_reqs, bad_rows, n = measure_stop_hold(impl, tok, reqs, 3, seed=9)
    print(f"stop strings, 1-3 ids/row: held back beyond rule 3 in {bad_reqs} of {n} "
          f"requests ({bad_rows} rows)")


def section_runs(args: argparse.Namespace) -> None:
    tok = llama2_style(args.vocab)
    if args.save:
        tok.save(args.save)
    byte_of = byte_values(tok)
    reqs = eval_requests(tok, args.requests, byte_of)
    n_ids = sum(map(len, reqs))
    in_runs = sum(1 for ids in reqs for i in ids if i in byte_of)
    print(f"tokenizer: Llama-2-style BPE, vocab {tok.get_vocab_size()} (trained here, "
          f"byte_fallback); {len(reqs)} requests, {n_ids} ids, {in_runs} byte-fallback ids")
    impls = [Impl("current", "sglang_tok", tok)]
    if args.baseline:
        baseline_package(args.baseline)
        impls.insert(0, Impl(f"baseline {args.baseline}", "sglang_tok_base", tok))
    for impl in impls:
        report_runs(impl, tok, reqs, byte_of)
    print(f"cost, us per id (best of {args.repeat}, interleaved):")
    costs = measure_cost(impls, tok, reqs, args.repeat)
    for name in costs[0]:
        vals = "  ".join(f"{impl.name}: {c[name]:6.2f}" for impl, c in zip(impls, costs))
        print(f"  {name:<18} {vals}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--section", choices=["rows", "runs", "all"], default="rows")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs; the best is kept")
    rows = ap.add_argument_group("--section rows")
    rows.add_argument("--tokenizer",
                      help="a byte-fallback tokenizer.json (default: trained in-process)")
    rows.add_argument("--rows", type=int, nargs="+", default=[16, 256, 1024])
    rows.add_argument("--ids-per-row", type=int, default=1)
    rows.add_argument("--length", type=int, default=120, help="ids per request")
    rows.add_argument("--skip-special", action="store_true")
    rows.add_argument("--workload", nargs="+", choices=["latin", "multilingual"],
                      default=["latin", "multilingual"])
    runs = ap.add_argument_group("--section runs")
    runs.add_argument("--requests", type=int, default=120)
    runs.add_argument("--vocab", type=int, default=4000)
    runs.add_argument("--baseline", help="git revision to measure side by side (e.g. HEAD~1)")
    runs.add_argument("--save", help="write the trained tokenizer.json here")
    args = ap.parse_args()
    if args.section in ("rows", "all"):
        section_rows(args)
    if args.section in ("runs", "all"):
        section_runs(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
