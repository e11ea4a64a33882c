#!/usr/bin/env python3
"""Byte-fallback rows (Llama-2 / Mistral / Gemma style): cost per row of the array decoder
(`shards/fallback_decode.py`), its plain-Python loop, today's `WindowStream.push` and one
`tokenizers` DecodeStream.step, side by side in one run.

A message holds R rows of distinct slots (R = 16, 256, 1024 by default), each row
--ids-per-row ids of its own request, the requests being multilingual text with emoji and
rare characters (so byte runs open and close, some across rows). Each decoder walks the
same messages; the array decoder and the loop carry their per-slot state in arrays (the
gather before and the write-back after each message are timed with them, as a shard would
pay them). CPU time of this thread, best of --repeat runs (the machine is shared). Every
row's text is checked against WindowStream's before timing.

    python scripts/bench_fallback.py --repeat 3
    python scripts/bench_fallback.py --tokenizer path/to/llama2/tokenizer.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # zoo: the trained Llama-2-style tokenizers

import numpy as np  # noqa: E402
from sglang_tok.shards.fallback_decode import (  # noqa: E402
    FallbackTable,
    decode_rows_fallback,
    decode_rows_loop,
    fallback_table,
)
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from tokenizers.decoders import DecodeStream  # noqa: E402

from sglang_tok.decoder import WindowStream  # noqa: E402
from sglang_tok.ragged import ragged_index  # noqa: E402
from sglang_tok.tokenizer import TokenizerInfo, describe, load  # noqa: E402

EXTRAS = ["🚶\ufe0f ", "👩\u200d👩\u200d👧\u200d👦", " 🏳\ufe0f\u200d🌈", "👍🏽", "❤\ufe0f", " 😀",
          "𠀋", " 𪚥龘鱻", "ᚠᛇᚻ", "ሰላም", " ᏣᎳᎩ"]


def workload(name: str) -> list[str]:
    """latin: English, code and markdown, one emoji now and then; multilingual: every corpus
    line (CJK, Thai, Arabic, emoji sequences) and rare characters outside the vocabulary."""
    import zoo
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


def llama2_style() -> Tokenizer:
    """tests/zoo.py's Llama-2 pipeline with the corpus's whole alphabet (as Llama-2 has
    every common character): byte runs come from emoji and rare characters only."""
    import zoo
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()  # pieces end at "▁", as SentencePiece's
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=zoo.SPECIALS,
                                  show_progress=False)
    tok.train_from_iterator(zoo.CORPUS * 20, trainer)
    return zoo._with_byte_tokens(tok)


class ArrayState:
    """Per-slot state as a shard would keep it: open runs (width grows), flags, skip."""

    def __init__(self, slots: int) -> None:
        self.runs = np.zeros((slots, 8), np.uint8)
        self.run_len = np.zeros(slots, np.int64)
        self.started = np.zeros(slots, bool)
        self.skip = np.zeros(slots, np.int64)

    def step(self, fn: Callable[..., object], tab: FallbackTable, slots: np.ndarray,
             ids: np.ndarray, starts: np.ndarray, sel: np.ndarray) -> list[str] | None:
        d = fn(tab, ids, starts, sel, self.runs[slots], self.run_len[slots],
               self.started[slots], self.skip[slots])
        held = d.held  # type: ignore[attr-defined]
        self.run_len[slots] = held
        self.started[slots] = d.started  # type: ignore[attr-defined]
        self.skip[slots] = d.skip  # type: ignore[attr-defined]
        if len(d.held_data):  # type: ignore[attr-defined]
            width = self.runs.shape[1]
            top = int(held.max())
            if top > width:
                grown = np.zeros((len(self.runs), max(top, 2 * width)), np.uint8)
                grown[:, :width] = self.runs
                self.runs, width = grown, grown.shape[1]
            rows = np.flatnonzero(held)
            dest = ragged_index(slots[rows] * width, held[rows])
            self.runs.reshape(-1)[dest] = d.held_data  # type: ignore[attr-defined]
        return d.parts  # type: ignore[attr-defined, no-any-return]


def messages(reqs: list[list[int]], rows: int, per_row: int
             ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]]:
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


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def measure(info: TokenizerInfo, tab: FallbackTable, wl: str, rows: int,
            args: argparse.Namespace) -> None:
    skip = args.skip_special
    reqs = requests(info, workload(wl), rows, args.length, seed=rows)
    msgs = messages(reqs, rows, args.ids_per_row)
    nrows = len(msgs) * rows
    nids = nrows * args.ids_per_row
    share = np.isin(np.concatenate([m[1] for m in msgs]),
                    np.array(sorted(info.byte_fallback_ids))).mean()
    sel = np.full(rows, int(skip), np.int64)

    # exactness first: every row of both array-state decoders against WindowStream
    ws = [WindowStream(info, skip) for _ in range(rows)]
    state_a, state_l = ArrayState(rows), ArrayState(rows)
    for slots, flat, starts, row_ids in msgs:
        want = [w.push(r) for w, r in zip(ws, row_ids)]
        got = state_l.step(decode_rows_loop, tab, slots, flat, starts, sel)
        assert got == want
        d = decode_rows_fallback(tab, flat, starts, sel, state_a.runs[slots],
                                 state_a.run_len[slots], state_a.started[slots],
                                 state_a.skip[slots])
        assert [d.text[d.chars[j]:d.chars[j + 1]] for j in range(rows)] == want
        state_a.step(decode_rows_fallback, tab, slots, flat, starts, sel)

    def run_array(fn: Callable[..., object] = decode_rows_fallback) -> None:
        state = ArrayState(rows)
        for slots, flat, starts, _ in msgs:
            state.step(fn, tab, slots, flat, starts, sel)

    def run_window() -> None:
        streams = [WindowStream(info, skip) for _ in range(rows)]
        for *_, row_ids in msgs:
            for w, r in zip(streams, row_ids):
                w.push(r)

    def run_decode_stream() -> None:
        tok = info.tokenizer
        streams = [DecodeStream(skip_special_tokens=skip) for _ in range(rows)]
        for *_, row_ids in msgs:
            for ds, r in zip(streams, row_ids):
                for x in r:
                    ds.step(tok, x)

    t_arr = best(run_array, args.repeat) / nrows
    t_loop = best(lambda: run_array(decode_rows_loop), args.repeat) / nrows
    t_win = best(run_window, args.repeat) / nrows
    t_ds = best(run_decode_stream, args.repeat) / nids
    print(f"| {wl} | {rows} | {share:.1%} | {t_arr * 1e6:.3f} | {t_loop * 1e6:.3f} | "
          f"{t_win * 1e6:.3f} | {t_ds * 1e6:.3f} | {t_arr / t_win:.3f}x | "
          f"{t_loop / t_win:.3f}x | {t_arr / (t_ds * args.ids_per_row):.3f}x |")



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tokenizer",
                    help="a byte-fallback tokenizer.json (default: trained in-process)")
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 256, 1024])
    ap.add_argument("--ids-per-row", type=int, default=1)
    ap.add_argument("--length", type=int, default=120, help="ids per request")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-special", action="store_true")
    ap.add_argument("--workload", nargs="+", choices=["latin", "multilingual"],
                    default=["latin", "multilingual"])
    args = ap.parse_args()
    if args.tokenizer:
        info = load(args.tokenizer)
    else:
        info = describe(llama2_style(), "trained-llama2-style")
    tab = fallback_table(info)
    assert tab is not None, "not a Metaspace + ByteFallback tokenizer"
    print(f"tokenizer {info.name}: vocab {info.vocab_size}, {args.ids_per_row} id(s) per row, "
          f"best of {args.repeat} (thread CPU)")
    print("| workload | rows/msg | byte ids | array us/row | loop us/row | WindowStream us/row | "
          "DecodeStream.step us/id | array / Window | loop / Window | array / DecodeStream |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for wl, rows in [(w, r) for w in args.workload for r in args.rows]:
        measure(info, tab, wl, rows, args)

if __name__ == "__main__":
    main()
