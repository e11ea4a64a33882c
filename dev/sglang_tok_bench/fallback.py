"""Byte-fallback tokenizers (Llama-2 / Mistral / Gemma style): what the service costs and
holds back on them, in two sections (`scripts/bench/fallback.py`).

--section rows (the default): cost per row of the array decoder
(`shards/byte_fallback/codec.py`), its plain-Python loop, the window family's decoder
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
for another checkout side by side (`--baseline REV`: a git revision, made into a worktree
with its own venv, or a checkout's folder; each side decodes in a process of its own
checkout's python, `fallback_worker.py`, and this one judges what both sent):
  anchored    ids whose attribution differs from the per-character oracle
  behind      rows (one id per row, and 1-4 ids per row) after which the service's text is
              shorter than DecodeStream's, split by whether the row ends inside a byte run
  stop hold   requests with stop strings (1-4 ids per row) whose sent text was ever behind
              the decoder's final text by more than max(len(stop)) - 1 characters (rule 3)
  cost        microseconds per id: DecodeStream.step, a per-row request's decoding (1 and
              1-4 ids per row) and attributed rows (Request.row with attribution)
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from tokenizers.decoders import DecodeStream

from sglang_tok.protocols.model.control import Open
from sglang_tok.ragged import ragged_index
from sglang_tok.tokenizer import TokenizerInfo, describe, load
from sglang_tok_bench.checkout import resolve
from sglang_tok_bench.corpora import LOCALES_LLAMA2, faker_texts, llama2_style
from sglang_tok_bench.fallback_worker import STOPS
from sglang_tok_bench.figures import markdown, markdown_row
from sglang_tok_bench.timing import interleaved, timed
from sglang_tok_testkit import zoo
from sglang_tok_testkit.oracles import byte_values, oracle_anchors, to_bytes
from sglang_tok_testkit.processes import workdir
from shards.byte_fallback.codec import decode_rows_fallback, decode_rows_loop
from shards.byte_fallback.table import FallbackTable, fallback_table
from shards.decoding.slots import Slots
from shards.window.decoder import WindowDecoder

WORKER = Path(__file__).with_name("fallback_worker.py")  # run as a file by each side's python

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


def rows_of(ids: list[int], rng: random.Random, hi: int) -> list[list[int]]:
    out, i = [], 0
    while i < len(ids):
        k = rng.randint(1, hi)
        out.append(ids[i:i + k])
        i += k
    return out


def cut(reqs: list[list[int]], hi: int, seed: int) -> list[list[list[int]]]:
    """Every request in rows of 1 to `hi` ids, one generator for them all, in order."""
    rng = random.Random(seed)
    return [rows_of(ids, rng, hi) for ids in reqs]


def final_chars(tok: Tokenizer, ids: list[int], k: int, byte_ids: set[int] | frozenset[int]
                ) -> int:
    """Characters of the decoder's final text after the first k ids: it ends where the
    open byte run begins."""
    s = k
    while s > 0 and ids[s - 1] in byte_ids:
        s -= 1
    return len(tok.decode(ids[:s])) if s else 0


def step_decodestream(ds: DecodeStream, tok: Tokenizer, row: list[int]) -> str | None:
    """DecodeStream's text for one row's ids; None where it raises."""
    out = ""
    try:
        for i in row:
            out += ds.step(tok, i) or ""
    except Exception:
        return None
    return out


# the cuts of the judged runs (the generators' seeds: as the measures were first run)
BEHIND_SEED, STOP_SEED, STOP_ROWS, COST_SEED = 5, 9, 3, 3


class Runs:
    """The held-out requests, the trained tokenizer, and what each run decodes: written
    as the setup every side's worker reads."""

    def __init__(self, tok: Tokenizer, reqs: list[list[int]], work: Path) -> None:
        self.tok, self.reqs = tok, reqs
        self.info = describe(tok, "llama2-style")
        self.byte_of = byte_values(tok)
        self.behind = {hi: cut(reqs, hi, BEHIND_SEED) for hi in (1, 4)}
        self.stop = cut(reqs, STOP_ROWS, STOP_SEED)
        # DecodeStream raises on some: their cost is not comparable
        self.cost_reqs = [ids for ids in reqs if step_decodestream(
            DecodeStream(skip_special_tokens=True), tok, ids) is not None]
        tok.save(str(work / "tokenizer.json"))
        self.path = work / "setup.json"
        self.path.write_text(json.dumps({
            "tokenizer": str(work / "tokenizer.json"), "reqs": reqs,
            "behind": {str(hi): rows for hi, rows in self.behind.items()},
            "stop": self.stop, "cost_reqs": self.cost_reqs,
            "multi": cut(self.cost_reqs, 4, COST_SEED)}))


class Side:
    """One checkout's decoding, in a worker process of its python (`fallback_worker.py`,
    run as a file: it imports only that checkout)."""

    def __init__(self, name: str, python: str, setup: Path) -> None:
        self.name = name
        # -P: the worker's folder (this checkout's package) is not put on its sys.path
        self.proc = subprocess.Popen([python, "-P", str(WORKER), str(setup)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._read() != "ready":
            raise SystemExit(f"bench fallback: the {name} worker did not start")

    def _read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench fallback: the {self.name} worker exited "
                             f"({self.proc.wait()})")
        return json.loads(line)

    def ask(self, line: str) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)


def judge_anchored(runs: Runs, got: list[list[list[int]]]) -> tuple[int, int, int]:
    """(ids, requests) whose attributions are not the per-character oracle's, of (ids)."""
    bad_ids = bad_reqs = total = 0
    special = runs.info.special_ids
    for ids, attrs in zip(runs.reqs, got):
        text, want = oracle_anchors(runs.tok, ids, True, special, runs.byte_of)
        want = to_bytes(text, want)
        have = [(t, k, off) for t, k, off in attrs]
        bad = sum(1 for a, b in zip(have, want) if a != b) + abs(len(have) - len(want))
        bad_ids += bad
        bad_reqs += bad > 0
        total += len(ids)
    return bad_ids, bad_reqs, total


def judge_behind(runs: Runs, hi: int, got: list[list[str]]) -> dict[str, int]:
    """Rows after which the side's text is shorter than DecodeStream's, split by whether
    the row ends inside a byte run, and how often each decoder was exact."""
    tok, byte_ids = runs.tok, runs.info.byte_fallback_ids
    c = dict.fromkeys(("rows", "inside", "inside_chars", "outside", "outside_chars",
                       "ds_failed", "ds_diverged", "ours_exact"), 0)
    for ids, rows, texts in zip(runs.reqs, runs.behind[hi], got):
        ds = DecodeStream(skip_special_tokens=True)
        ours, theirs, ds_ok, k = "", "", True, 0
        for n, (row, text) in enumerate(zip(rows, texts)):
            ours += text
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


def judge_stop_hold(runs: Runs, got: list[list[int]]) -> tuple[int, int, int]:
    """Requests (and rows) whose sent text fell more than rule 3 behind the final text."""
    tok, byte_ids = runs.tok, runs.info.byte_fallback_ids
    allow = max(map(len, STOPS)) - 1
    bad_reqs = bad_rows = 0
    for ids, rows, sent_per_row in zip(runs.reqs, runs.stop, got):
        sent, k, bad = 0, 0, 0
        for row, chars in zip(rows, sent_per_row):
            sent += chars
            k += len(row)
            bad += sent < final_chars(tok, ids, k, byte_ids) - allow
        bad_rows += bad
        bad_reqs += bad > 0
    return bad_reqs, bad_rows, len(runs.reqs)


def report_runs(runs: Runs, side: Side) -> None:
    print(f"== {side.name}")
    bad_ids, bad_reqs, total = judge_anchored(runs, side.ask("anchored"))
    print(f"anchored != oracle: {bad_ids} of {total} ids, in {bad_reqs} of {len(runs.reqs)} "
          "requests")
    for hi in (1, 4):
        c = judge_behind(runs, hi, side.ask(f"behind {hi}"))
        print(f"behind DecodeStream, 1-{hi} ids/row: {c['outside']} rows outside runs "
              f"({c['outside_chars']} chars), {c['inside']} inside runs "
              f"({c['inside_chars']} chars) of {c['rows']} rows; DecodeStream failed on "
              f"{c['ds_failed']}, diverged on {c['ds_diverged']}; ours exact "
              f"{c['ours_exact']}/{len(runs.reqs)}")
    bad_reqs, bad_rows, n = judge_stop_hold(runs, side.ask("stop"))
    print(f"stop strings, 1-3 ids/row: held back beyond rule 3 in {bad_reqs} of {n} "
          f"requests ({bad_rows} rows)")


def measure_cost(runs: Runs, sides: list[Side], repeat: int) -> list[dict[str, float]]:
    """Best time per id (us) of each loop, per side; every round asks each side for one
    run of each loop in turn, which side goes first alternating by round."""
    names: list[str] = sides[0].ask("names")
    got: dict[tuple[str, int], list[float]] = {(name, k): [] for name in names
                                               for k in range(len(sides))}
    for rnd in range(repeat):
        order = list(enumerate(sides))
        for name in names:
            for k, side in (order if rnd % 2 == 0 else order[::-1]):
                got[name, k].append(float(side.ask(f"cost {name}")))
    n = sum(len(ids) for ids in runs.cost_reqs)
    return [{name: min(got[name, k]) / n * 1e6 for name in names} for k in range(len(sides))]


def section_runs(args: argparse.Namespace, here: Path) -> None:
    tok = llama2_style(args.vocab)
    if args.save:
        tok.save(args.save)
    byte_of = byte_values(tok)
    reqs = eval_requests(tok, args.requests, byte_of)
    n_ids = sum(map(len, reqs))
    in_runs = sum(1 for ids in reqs for i in ids if i in byte_of)
    print(f"tokenizer: Llama-2-style BPE, vocab {tok.get_vocab_size()} (trained here, "
          f"byte_fallback); {len(reqs)} requests, {n_ids} ids, {in_runs} byte-fallback ids")
    runs = Runs(tok, reqs, workdir("bench-fallback-"))
    pythons = [("current", sys.executable)]
    if args.baseline:
        other = resolve(args.baseline, here)
        if not other.python.exists():
            raise SystemExit(f"--baseline: no python at {other.python}")
        pythons.insert(0, (f"baseline {args.baseline}", str(other.python)))
    sides = [Side(name, python, runs.path) for name, python in pythons]
    try:
        for side in sides:
            report_runs(runs, side)
        print(f"cost, us per id (best of {args.repeat}, interleaved):")
        costs = measure_cost(runs, sides, args.repeat)
    finally:
        for side in sides:
            side.close()
    for name in costs[0]:
        vals = "  ".join(f"{side.name}: {c[name]:6.2f}" for side, c in zip(sides, costs))
        print(f"  {name:<18} {vals}")


def main(args: argparse.Namespace, here: Path) -> int:
    """`scripts/bench/fallback.py` in the checkout at `here` (where `--baseline REV` is a
    revision of)."""
    if args.section in ("rows", "all"):
        section_rows(args)
    if args.section in ("runs", "all"):
        section_runs(args, here)
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/fallback.py` (its `main` parses them)."""
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
    runs.add_argument("--baseline",
                      help="another checkout to measure side by side: a git revision (e.g. "
                           "HEAD~1; a worktree with its own venv is made) or a checkout's folder")
    runs.add_argument("--save", help="write the trained tokenizer.json here")
