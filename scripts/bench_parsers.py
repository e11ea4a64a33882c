#!/usr/bin/env python3
"""Parser cost per id: our incremental decoder alone vs decoder + ParsedStream, same ids.

A trace of realistic DeepSeek-V4 outputs (multilingual faker text, code, emoji; a
`<think>` block in most, a DSML tool-call section with multilingual and code arguments in
some), encoded with the built-in tokenizer and cut into rows of 1 id (a decode step) or
1..4 ids, requests interleaved as a scheduler would send them. Each configuration is timed
side by side with the decoder alone in the same run (best of --repeat, process CPU time:
the machine is shared), and every parsed
result is checked against `parse_full` of the full decode. Prints ns/id and the ratio.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from sglang_tok.shards.table import RidTable

from sglang_tok.decoder import ByteStream
from sglang_tok.load.workload import BUILTIN_TEXTS
from sglang_tok.parsers import ParsedDelta, make_parsed_stream, marker_token_ids, merge, skip_table
from sglang_tok.protocol import Batch, Delta, Open, decode_batch
from sglang_tok.scheduler import encode_step
from sglang_tok.stops import StopMatcher
from sglang_tok.tokenizer import TokenizerInfo, load

CODE = ["def area(r: float) -> float:\n    return 3.14159 * r ** 2  # 🙂\n",
        "for (let i = 0; i < n; i++) { console.log(`值 ${i}`); }",
        'SELECT name FROM users WHERE city = "東京" AND age > 30;']


def corpus(seed: int) -> list[str]:
    try:
        from faker import Faker
    except ImportError:
        return BUILTIN_TEXTS + CODE
    out = []
    for loc in ("en_US", "zh_CN", "ja_JP", "ru_RU", "ar_AA", "hi_IN", "ko_KR"):
        f = Faker(loc)
        f.seed_instance(seed)
        out += [f.text(max_nb_chars=300) for _ in range(20)]
    return out + CODE


def dsml_call(rng: random.Random, texts: list[str]) -> str:
    args: dict[str, Any] = {"query": rng.choice(texts)[:80], "limit": rng.randint(1, 50)}
    if rng.random() < 0.5:
        args["code"] = rng.choice(CODE)
    params = "".join(
        f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n'
        if isinstance(v, str) else
        f'<｜DSML｜parameter name="{k}" string="false">{json.dumps(v)}</｜DSML｜parameter>\n'
        for k, v in args.items())
    return f'<｜DSML｜invoke name="{rng.choice(["search", "run_code", "weather"])}">\n{params}' \
           '</｜DSML｜invoke>\n'


def output(rng: random.Random, texts: list[str]) -> str:
    out = ""
    if rng.random() < 0.8:
        out += "<think>\n" + " ".join(rng.choice(texts) for _ in range(2)) + "\n</think>\n\n"
    out += " ".join(rng.choice(texts) for _ in range(rng.randint(1, 3)))
    if rng.random() < 0.3:
        out += "\n\n<｜DSML｜tool_calls>\n" + "".join(
            dsml_call(rng, texts) for _ in range(rng.randint(1, 2))) + "</｜DSML｜tool_calls>"
    return out


def rows_of(info: TokenizerInfo, n: int, concurrency: int, max_row: int,
            seed: int) -> tuple[list[list[int]], list[tuple[int, list[int]]]]:
    """Per request ids, and the interleaved (request, row ids) order of a scheduler."""
    rng = random.Random(seed)
    texts = corpus(seed)
    reqs = [info.tokenizer.encode(output(rng, texts), add_special_tokens=False).ids
            for _ in range(n)]
    order: list[tuple[int, list[int]]] = []
    pos = [0] * n
    live = list(range(min(concurrency, n)))
    nxt = len(live)
    while live:
        still = []
        for r in live:
            k = rng.randint(1, max_row)
            order.append((r, reqs[r][pos[r]:pos[r] + k]))
            pos[r] += k
            if pos[r] < len(reqs[r]):
                still.append(r)
            elif nxt < n:
                still.append(nxt)
                nxt += 1
        live = still
    return reqs, order


def run(info: TokenizerInfo, reqs: list[list[int]], order: list[tuple[int, list[int]]],
        config: dict[str, Any] | None, stop: list[str] | None = None) -> tuple[float, list[Any]]:
    """Seconds for the whole trace; per request, what came out.

    `config` None: the decoder alone, plus the service's StopMatcher when `stop` is given
    (what the shard does today for such a request).
    """
    n = len(reqs)
    table = info.byte_table_skip
    parsers: list[Any] = [None] * n
    if config is not None:
        probe = make_parsed_stream(**config)
        table = skip_table(info, marker_token_ids(info, probe.markers))
    assert table is not None
    left = [len(ids) for ids in reqs]
    t0 = time.process_time()
    streams = [ByteStream(table, []) for _ in range(n)]
    outs: list[Any] = [[] for _ in range(n)]
    if config is None and stop:
        matchers = [StopMatcher(stop) for _ in range(n)]
        for r, ids in order:
            outs[r].append(matchers[r].feed(streams[r].push(ids))[0])
            left[r] -= len(ids)
            if not left[r]:
                outs[r].append(matchers[r].feed(streams[r].flush(), True)[0])
    elif config is None:
        for r, ids in order:
            outs[r].append(streams[r].push(ids))
            left[r] -= len(ids)
            if not left[r]:
                outs[r].append(streams[r].flush())
    else:
        parsers = [make_parsed_stream(**config) for _ in range(n)]
        for r, ids in order:
            p = parsers[r]
            outs[r].append(p.feed(streams[r].push(ids)))
            left[r] -= len(ids)
            if not left[r]:
                outs[r].append(p.feed(streams[r].flush()))
                outs[r].append(p.finish())
    return time.process_time() - t0, outs


def frames_of(reqs: list[list[int]], order: list[tuple[int, list[int]]]) -> list[Batch]:
    """The trace as the BATCH frames a scheduler sends: one per step, a request at most once
    per frame, its last row with a length finish. Decoded (validated) before timing."""
    left = [len(ids) for ids in reqs]
    frames: list[Batch] = []
    rids: list[str] = []
    rows: list[list[int]] = []
    fins: list[dict[str, Any] | None] = []
    seen: set[int] = set()
    for r, ids in order + [(-1, [])]:
        if r in seen or r < 0:
            frames.append(decode_batch(encode_step(rids, rows, finish_reasons=fins)))
            rids, rows, fins, seen = [], [], [], set()
        if r < 0:
            break
        seen.add(r)
        left[r] -= len(ids)
        rids.append(f"r{r}")
        rows.append(ids)
        fins.append(None if left[r] else {"type": "length"})
    return frames


def run_table(info: TokenizerInfo, n: int, frames: list[Batch],
              opts: dict[str, Any]) -> tuple[float, dict[str, list[Delta]]]:
    """Seconds in the shard's `RidTable.on_batch` for the whole trace (OPENs not timed)."""
    table = RidTable(info, 0, max_requests=n + 1, ended_memory=n + 1)
    for r in range(n):
        sink: list[Delta] = []
        table.on_open(Open(f"r{r}", **opts), sink)
        assert not sink, sink
    out: list[Delta] = []
    gc.collect()  # every run starts from the same heap: a collection is not charged to one
    t0 = time.process_time()
    for batch in frames:
        table.on_batch(batch, out)
    dt = time.process_time() - t0
    per: dict[str, list[Delta]] = {}
    for d in out:
        per.setdefault(d.rid, []).append(d)
    return dt, per


def table_mode(info: TokenizerInfo, args: argparse.Namespace) -> int:
    """--table: the same traces through the shard's table, parser on vs off, side by side."""
    bad = 0
    for max_row in (1, 4):
        reqs, order = rows_of(info, args.requests, args.concurrency, max_row, args.seed)
        frames = frames_of(reqs, order)
        total = sum(map(len, reqs))
        print(f"\nshard table: {len(reqs)} requests, {total} ids, rows of 1..{max_row} ids, "
              f"{len(frames)} frames")
        print(f"{'parser':<16} {'off ns/id':>10} {'on ns/id':>10} {'ratio':>7}")
        for name, config in CONFIGS.items():
            off_opts = {"stop": config["stop"]} if "stop" in config else {}
            base = best = float("inf")
            per: dict[str, list[Delta]] = {}
            for _ in range(args.repeat):  # alternate, so both see the same machine state
                base = min(base, run_table(info, len(reqs), frames, off_opts)[0])
                dt, per = run_table(info, len(reqs), frames, config)
                best = min(best, dt)
            for r, want in enumerate(references(info, reqs, config)):
                ds = per.get(f"r{r}", [])
                got = merge([ParsedDelta(d.text, d.reasoning, d.tool_calls) for d in ds])
                ended = bool(ds and (ds[-1].finish or {}).get("tool_calls"))
                if (got.text, got.reasoning, got.tool_calls, ended) != (
                        want.text, want.reasoning, want.tool_calls, want.ended_with_tool_calls):
                    bad += 1
            print(f"{name:<16} {base / total * 1e9:>10.0f} {best / total * 1e9:>10.0f} "
                  f"{best / base:>6.2f}x")
    print(f"\nexactness: {'all requests equal parse_full' if not bad else f'{bad} differ'}")
    return 1 if bad else 0


def references(info: Any, reqs: list[list[int]], config: dict[str, Any]) -> list[ParsedDelta]:
    """What each request must come to: the parser on the whole decode, markers kept."""
    ref = make_parsed_stream(**config)
    keep = marker_token_ids(info, ref.markers)
    return [ref.parse_full(info.tokenizer.decode(
        [i for i in ids if i not in info.special_ids or i in keep], skip_special_tokens=False))
        for ids in reqs]


CONFIGS: dict[str, dict[str, Any]] = {
    "deepseek-r1": {"reasoning_parser": "deepseek-r1"},
    "deepseekv4": {"tool_parser": "deepseekv4"},
    "deepseekv3": {"tool_parser": "deepseekv3"},
    "hermes": {"tool_parser": "hermes"},
    "mistral": {"tool_parser": "mistral"},
    "r1+deepseekv4": {"reasoning_parser": "deepseek-r1", "tool_parser": "deepseekv4"},
    "r1+v4+stop": {"reasoning_parser": "deepseek-r1", "tool_parser": "deepseekv4",
                   "stop": ["<<never>>", "\n\n\n\n"]},
    "qwen3_coder": {"tool_parser": "qwen3_coder"},
    # tool_stream "whole" (the default is "incremental"): calls leave in one fragment
    "deepseekv4/whole": {"tool_parser": "deepseekv4", "tool_stream": "whole"},
    "r1+v4/whole": {"reasoning_parser": "deepseek-r1", "tool_parser": "deepseekv4",
                    "tool_stream": "whole"},
}


# first-fragment latency: one call writing a long string argument, each format's markers
# special tokens of the DeepSeek-V4 tokenizer (as in each model's own tokenizer)
LONG = "".join(f"def f{i}(x):\n    return x * {i}  # 值 {i}\n" for i in range(60))
LATENCY_CALLS = {
    "qwen3_coder": (["<tool_call>", "</tool_call>"],
                    "<tool_call>\n<function=write>\n<parameter=content>\n" + LONG
                    + "\n</parameter>\n</function>\n</tool_call>"),
    "glm45": (["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>"], "<tool_call>write\n<arg_key>content</arg_key>\n<arg_value>"
              + LONG + "</arg_value>\n</tool_call>"),
    "glm47": (["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>"], "<tool_call>write<arg_key>content</arg_key><arg_value>"
              + LONG + "</arg_value></tool_call>"),
    "minimax_m2": (["<minimax:tool_call>", "</minimax:tool_call>"],
                   '<minimax:tool_call>\n<invoke name="write">\n<parameter name="content">'
                   + LONG + "</parameter>\n</invoke>\n</minimax:tool_call>"),
}


def first_fragment_latency(fmt: str, specials: list[str], text: str) -> dict[str, int]:
    """Rows of 1 id: at which id the name leaves, the first arguments bytes, and the first
    bytes of the value; returned as ids after the name's last id (and after the name's
    delta). The call's `tools` declare `content` a string."""
    from tokenizers import AddedToken, Tokenizer

    from sglang_tok.tokenizer import describe
    tok = Tokenizer.from_str(load("deepseek-v4").tokenizer.to_str())
    tok.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in specials])
    info = describe(tok, f"deepseek-v4+{fmt}")
    assert info.byte_table is not None
    tools = [{"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "properties": {"content": {"type": "string"}}}}}]
    p = make_parsed_stream(tool_parser=fmt, tools=tools)
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    dec, seen, args, out = ByteStream(info.byte_table, []), "", "", {}
    name_end = text.index("write") + len("write")
    for n, i in enumerate(ids):
        seen += (piece := dec.push([i]))
        if "name_id" not in out and len(seen) >= name_end:
            out["name_id"] = n
        for c in p.feed(piece).tool_calls or ():
            if c.name is not None:
                out.setdefault("name_delta", n)
            elif c.arguments:
                out.setdefault("args", n)
                args += c.arguments
                if len(args) > len('{"content": "'):
                    out.setdefault("value", n)
    return {"name": out["name_delta"] - out["name_id"], "args": out["args"] - out["name_delta"],
            "value": out["value"] - out["name_delta"], "ids": len(ids)}


def latency_mode() -> int:
    print(f"{'parser':<12} {'name after':>10} {'args after':>10} {'value after':>11}  "
          "(ids; name after its last id, the others after the name's delta)")
    for fmt, (specials, text) in LATENCY_CALLS.items():
        r = first_fragment_latency(fmt, specials, text)
        print(f"{fmt:<12} {r['name']:>10} {r['args']:>10} {r['value']:>11}  "
              f"({r['ids']} ids in the call)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--table", action="store_true",
                    help="through the shard's RidTable.on_batch (BATCH frames, OPEN options, "
                         "Deltas), parser on vs the same requests without it")
    ap.add_argument("--latency", action="store_true",
                    help="first-fragment latency in ids of the schema-typed XML formats")
    args = ap.parse_args()
    if args.latency:
        return latency_mode()
    info = load("deepseek-v4")
    if args.table:
        return table_mode(info, args)
    bad = 0
    for max_row in (1, 4):
        reqs, order = rows_of(info, args.requests, args.concurrency, max_row, args.seed)
        total = sum(map(len, reqs))
        print(f"\ntrace: {len(reqs)} requests, {total} ids, rows of 1..{max_row} ids "
              f"({len(order)} rows)")
        print(f"{'parser':<16} {'without ns/id':>14} {'with ns/id':>14} {'ratio':>7}")
        for name, config in CONFIGS.items():
            base = best = float("inf")
            for _ in range(args.repeat):  # alternate, so both see the same machine state
                base = min(base, run(info, reqs, order, None, config.get("stop"))[0])
                dt, outs = run(info, reqs, order, config)
                best = min(best, dt)
            for r, want in enumerate(references(info, reqs, config)):
                if merge(outs[r]) != want:
                    bad += 1
            print(f"{name:<16} {base / total * 1e9:>14.0f} {best / total * 1e9:>14.0f} "
                  f"{best / base:>6.2f}x")
    print(f"\nexactness: {'all requests equal parse_full' if not bad else f'{bad} differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
