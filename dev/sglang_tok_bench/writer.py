"""Cost per step of the scheduler-side writer, against two baselines, in the same run
(`scripts/bench/writer.py`).

Per step: `rows` running requests, `ids-per-row` new ids each (1: plain decode; 2-4:
speculative), rid strings as a frontend mints them, no finish, per-row counts. Measured:

- kit, array('q') rows: `sglang_tok.kit.scheduler.encode_step` with int64 buffers (joined as
  bytes; a numpy int64 array per row takes the same path);
- kit, array('i') rows: the same with SGLang's own int32 `output_ids` rows (one C widening);
- lean msgpack: a hand-written writer of the same bytes as one would write it first
  (header via msgspec, ids via `struct.pack(*ids)`);
- SGLang push_generation: the hot path of SGLang's rust_server `push_generation`
  (`list(map(len, output_ids))`, `array("i", chain.from_iterable(output_ids))`, one msgspec
  header of 4 columns, the parts concatenated; that later version sends int32 ids and
  4 header columns, so its frame differs from ours by design, not its cost structure).

Each figure is the median over `--repeats` rounds of `--number` builds, interleaved.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import struct
import timeit
from array import array
from itertools import chain
from typing import Any

import msgspec

from sglang_tok.kit.scheduler import encode_step
from sglang_tok.protocols.model.batch import decode_batch

_enc = msgspec.msgpack.Encoder().encode


def make_step(rows: int, k: int, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    ids = [[rng.randrange(0, 129280) for _ in range(k)] for _ in range(rows)]
    return {
        "rids": [f"chatcmpl-{rng.getrandbits(64):016x}-{n}" for n in range(rows)],
        "ids_q": [array("q", r) for r in ids], "ids_i": [array("i", r) for r in ids],
        "ids_list": ids, "finish": [None] * rows,
        "prompt": [rng.randrange(1, 4000) for _ in range(rows)],
        "cached": [0] * rows, "reasoning": [0] * rows,
    }


def kit(s: dict[str, Any], key: str) -> bytes:
    return encode_step(s["rids"], s[key], s["finish"], s["prompt"], s["cached"], s["reasoning"])


def lean(s: dict[str, Any]) -> bytes:
    ids = s["ids_list"]
    lens = [len(r) for r in ids]
    head = _enc([s["rids"], s["finish"], s["prompt"], lens, s["cached"], s["reasoning"]])
    flat = [i for r in ids for i in r]
    data = struct.pack(f"<{len(flat)}q", *flat)
    return b"\x02" + struct.pack("<I", len(head)) + head + data


def sglang_push_generation(s: dict[str, Any]) -> bytes:
    output_ids = s["ids_i"]
    tok_lens = list(map(len, output_ids))
    flat_ids = array("i", chain.from_iterable(output_ids))
    header_cols = [s["rids"], s["finish"], s["prompt"], tok_lens]
    data_cols = [flat_ids.tobytes()]
    header = msgspec.msgpack.encode(header_cols)
    return b"".join((b"\x02", struct.pack("<I", len(header)), header, *data_cols))


def main(a: argparse.Namespace) -> int:
    """`scripts/bench/writer.py`: per row count, every writer, interleaved rounds."""
    cases = {
        "kit, array('q') rows": lambda s: kit(s, "ids_q"),
        "kit, array('i') rows": lambda s: kit(s, "ids_i"),
        "lean msgpack (struct.pack)": lean,
        "SGLang push_generation": sglang_push_generation,
    }
    print(f"cost per step (µs, median of {a.repeats}), {a.ids_per_row} id(s) per row")
    for rows in a.rows:
        s = make_step(rows, a.ids_per_row)
        ours = kit(s, "ids_q")
        assert ours == kit(s, "ids_i") == lean(s), "the kit and the lean writer must agree"
        assert len(decode_batch(ours)) == rows
        number = a.number or max(10, 200_000 // rows)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(a.repeats):
            for name, fn in cases.items():
                t = timeit.timeit(functools.partial(fn, s), number=number)
                times[name].append(1e6 * t / number)
        base = statistics.median(times["lean msgpack (struct.pack)"])
        print(f"\n{rows} rows ({len(ours)} bytes):")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:<30} {med:9.1f} µs   {med / base:5.2f}x lean   "
                  f"{1000 * med / rows:6.0f} ns/row")
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/writer.py` (its `main` parses them)."""
    ap.add_argument("--rows", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--ids-per-row", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--number", type=int, default=0, help="builds per round (default: auto)")
