"""Parser cost per id: every tool parser, in both `tool_stream` modes, on its own format
(`scripts/bench/parsers.py`).

Per format, a trace of realistic outputs (multilingual faker text, code, emoji; a `<think>`
block in most, a tool-call block written in that format with multilingual and code
arguments in some), encoded with the built-in DeepSeek-V4 tokenizer, the format's markers
added as special tokens where they are not tokens of it (as each model's own tokenizer has
them), cut into rows of 1 id (a decode step) or 1..4 ids, requests interleaved as a
scheduler would send them. A format joins by name: a writer in `WRITERS` for a name in
`sglang_tok.parsers.FORMATS` (names without one are listed at the end).

--table: the shard's `RidTable.on_arrays`, the trace routed into ARRAYS link messages
before the clock starts (`rows.route_arrays`: the egress is another process in the
service), every request on the per-row path: parser on vs the same requests without a
parser (what a parser costs). Two figures: `on_arrays` into the output sink a shard uses
(the default output format's), and that plus the output frame's encoding, all of the
shard's work per ARRAYS message but the socket; the deltas checked are the ones decoded
from those frames. Default: the decoder and ParsedStream alone, no table.
Each configuration is timed side by side with its baseline, alternating (best of --repeat,
process CPU time: the machine is shared), and every request's streamed result is checked
against `parse_full` of its full decode (exactness; the exit status says). Prints ns/id and the
ratio, and how many of the calls written each parser found (a writer that does not match
its format would otherwise bench text).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ring import link
from sglang_tok.config import Config
from sglang_tok.kit.scheduler import encode_step
from sglang_tok.kit.workload import BUILTIN_TEXTS
from sglang_tok.parsers import (
    FORMATS,
    ParsedDelta,
    make_parsed_stream,
    marker_token_ids,
    merge,
)
from sglang_tok.process import freeze_heap
from sglang_tok.protocols.model.batch import Batch, decode_batch
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta, DeltasOut
from sglang_tok.protocols.model.output import decode_output, encode_output, output_sink
from sglang_tok.protocols.model.packed import Packed
from sglang_tok.stops import StopMatcher
from sglang_tok.tokenizer import TokenizerInfo, describe, load
from sglang_tok_bench.corpora import LOCALES, faker_texts, has_faker
from sglang_tok_bench.frame_rows import route_arrays
from sglang_tok_testkit.zoo import with_special_tokens
from shards.decoders import Decoders, decoders_for
from shards.decoding.interface import RowDecoder
from shards.decoding.slots import Slots
from shards.messages.table import RidTable

CODE = ["def area(r: float) -> float:\n    return 3.14159 * r ** 2  # 🙂\n",
        "for (let i = 0; i < n; i++) { console.log(`值 ${i}`); }",
        'SELECT name FROM users WHERE city = "東京" AND age > 30;']


def corpus(seed: int, which: str = "auto") -> list[str]:
    """The texts outputs are made of. `builtin`: short sentences (`BUILTIN_TEXTS`), so a
    call is a large share of an output's ids; `faker` (the `scripts` extra): texts of up
    to 300 characters in seven languages, about three times the ids per output for the
    same calls; `auto`: faker when it is installed. The ratios depend on that share (the
    parser costs most inside calls), so the table prints it."""
    if corpus_name(which) == "builtin":
        return BUILTIN_TEXTS + CODE
    if not has_faker():
        raise SystemExit("--corpus faker: pip install -e './dev[scripts]'")
    return faker_texts(seed, 20, 300, (*LOCALES, "ko_KR")) + CODE


def corpus_name(which: str) -> str:
    """What `--corpus` means here: `auto` is faker when it is installed."""
    if which != "auto":
        return which
    return "faker" if has_faker() else "builtin"


# ------------------------------------------------------------------ traces, per format
# what a shard encodes its output in unless told otherwise (--output-format)
OUTPUT_FORMAT = Config().output_format
NAMES = ["search", "run_code", "weather"]
PARAMS = {"query": {"type": "string"}, "limit": {"type": "integer"}, "code": {"type": "string"}}
TOOLS = [{"type": "function",
          "function": {"name": n, "parameters": {"type": "object", "properties": PARAMS}}}
         for n in NAMES]


def call_args(rng: random.Random, texts: list[str]) -> dict[str, Any]:
    args: dict[str, Any] = {"query": rng.choice(texts)[:80], "limit": rng.randint(1, 50)}
    if rng.random() < 0.5:
        args["code"] = rng.choice(CODE)
    return args


# --args files: a coding agent's calls, each writing a file of 20-60 lines (quotes,
# escapes, `<` in code, non-ASCII comments): the calls are most of the ids
FILE_LINES = ["def area(r: float) -> float:\n", '    """Area of a circle (半径 r)."""\n',
              "    return 3.14159 * r ** 2  # 🙂\n", "    if n < 0 or n > 100:\n",
              '        raise ValueError(f"bad n: {n!r}")\n', "    for i in range(n):\n",
              '        print("値", i, sep="\\t")\n', "\n", "class Cache(dict):\n",
              "    pass  # кэш\n", '    path = "C:\\\\tmp\\\\out.txt"\n',
              "    xs = [x for x in xs if x <= limit]\n"]


def file_args(rng: random.Random, texts: list[str]) -> dict[str, Any]:
    lines = [rng.choice(FILE_LINES) for _ in range(rng.randint(20, 60))]
    return {"query": f"src/{rng.choice(NAMES)}.py", "code": "".join(lines)}


ARGS = {"short": call_args, "files": file_args}
Call = tuple[str, dict[str, Any]]
# a format's writer: its tool-call block (section markers included) for 1-2 calls
Writer = Callable[[random.Random, list[Call]], str]


def _json(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


def _dsml(wrapper: str) -> Writer:
    def write(rng: random.Random, calls: list[Call]) -> str:
        invokes = "".join(
            f'<｜DSML｜invoke name="{name}">\n' + "".join(
                f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n'
                if isinstance(v, str) else
                f'<｜DSML｜parameter name="{k}" string="false">{json.dumps(v)}'
                '</｜DSML｜parameter>\n'
                for k, v in args.items()) + "</｜DSML｜invoke>\n" for name, args in calls)
        return f"\n\n<｜DSML｜{wrapper}>\n{invokes}</｜DSML｜{wrapper}>"
    return write


def _deepseekv3(rng: random.Random, calls: list[Call]) -> str:
    body = "".join(
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{_json(a)}\n```<｜tool▁call▁end｜>"
        if rng.random() < 0.5 else  # V3.1's form
        f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{_json(a)}<｜tool▁call▁end｜>" for n, a in calls)
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def _hermes(rng: random.Random, calls: list[Call]) -> str:
    return "\n" + "\n".join(f"<tool_call>\n{_json({'name': n, 'arguments': a})}\n</tool_call>"
                            for n, a in calls)


def _mistral(rng: random.Random, calls: list[Call]) -> str:
    if rng.random() < 0.5:  # v11+: one marker per call
        return "".join(f"[TOOL_CALLS]{n}[ARGS]{_json(a)}" for n, a in calls)
    return "[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in calls],
                                        ensure_ascii=False)


def _xml_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _qwen3_coder(rng: random.Random, calls: list[Call]) -> str:
    return "\n" + "\n".join(
        f"<tool_call>\n<function={n}>\n" + "".join(
            f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in a.items())
        + "</function>\n</tool_call>" for n, a in calls)


def _glm(sep: str) -> Writer:
    def write(rng: random.Random, calls: list[Call]) -> str:
        return "\n" + "\n".join(
            f"<tool_call>{n}{sep}" + "".join(
                f"<arg_key>{k}</arg_key>{sep}<arg_value>{_xml_value(v)}</arg_value>{sep}"
                for k, v in a.items()) + "</tool_call>" for n, a in calls)
    return write


def _minimax_m2(rng: random.Random, calls: list[Call]) -> str:
    return "\n<minimax:tool_call>\n" + "\n".join(
        f'<invoke name="{n}">\n' + "".join(
            f'<parameter name="{k}">{_xml_value(v)}</parameter>\n' for k, v in a.items())
        + "</invoke>" for n, a in calls) + "\n</minimax:tool_call>"


# formats being added on another branch: as their models write them (a writer that does not
# match the parser shows as fewer calls found than written)
def _kimi_k2(rng: random.Random, calls: list[Call]) -> str:
    return "<|tool_calls_section_begin|>" + "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{_json(a)}"
        "<|tool_call_end|>" for i, (n, a) in enumerate(calls)) + "<|tool_calls_section_end|>"


def _gpt_oss(rng: random.Random, calls: list[Call]) -> str:
    return "".join(f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json"
                   f"<|message|>{_json(a)}<|call|>" for n, a in calls)


def _llama3_json(rng: random.Random, calls: list[Call]) -> str:
    return "<|python_tag|>" + "; ".join(_json({"name": n, "parameters": a}) for n, a in calls)


def _pythonic(rng: random.Random, calls: list[Call]) -> str:
    return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={v!r}" for k, v in a.items()) + ")"
                           for n, a in calls) + "]"


_GLM = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
# format name -> (markers to add as special tokens, writer)
WRITERS: dict[str, tuple[tuple[str, ...], Writer]] = {
    "deepseekv4": ((), _dsml("tool_calls")),
    "deepseekv32": ((), _dsml("function_calls")),
    "deepseekv3": ((), _deepseekv3),
    "hermes": (("<tool_call>", "</tool_call>"), _hermes),
    "mistral": (("[TOOL_CALLS]", "[ARGS]"), _mistral),
    "qwen3_coder": (("<tool_call>", "</tool_call>"), _qwen3_coder),
    "glm45": (_GLM, _glm("\n")),
    "glm47": (_GLM, _glm("")),
    "minimax_m2": (("<minimax:tool_call>", "</minimax:tool_call>"), _minimax_m2),
    "kimi_k2": (("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                 "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
                _kimi_k2),
    "gpt-oss": (("<|start|>", "<|end|>", "<|channel|>", "<|constrain|>", "<|message|>",
                 "<|call|>", "<|return|>"), _gpt_oss),
    "llama3_json": (("<|python_tag|>",), _llama3_json),
    "pythonic": ((), _pythonic),
}


def formats() -> tuple[list[str], list[str]]:
    """(formats to bench: one name per distinct format, in FORMATS order; names of this
    branch's formats without a writer)."""
    seen: set[int] = set()
    names: list[str] = []
    missing: list[str] = []
    for name, fmt in FORMATS.items():
        if id(fmt) in seen:
            continue  # an alias (deepseekv31, qwen25, qwen)
        seen.add(id(fmt))
        (names if name in WRITERS else missing).append(name)
    return names, missing


@functools.cache
def tokenizer(specials: tuple[str, ...]) -> TokenizerInfo:
    """The built-in DeepSeek-V4 tokenizer, `specials` added as special tokens."""
    if not specials:
        return load("deepseek-v4")
    info = tokenizer(())  # loaded once, not once per marker set
    return describe(with_special_tokens(info.tokenizer, specials),
                    "deepseek-v4+" + "".join(specials))


def output(rng: random.Random, texts: list[str], write: Writer,
           make_args: Callable[[random.Random, list[str]], dict[str, Any]] = call_args
           ) -> tuple[str, int, str]:
    """(one output, the number of calls written in it, their block as written)."""
    out = ""
    if rng.random() < 0.8:
        out += "<think>\n" + " ".join(rng.choice(texts) for _ in range(2)) + "\n</think>\n\n"
    out += " ".join(rng.choice(texts) for _ in range(rng.randint(1, 3)))
    calls, block = 0, ""
    if rng.random() < 0.3:
        calls = rng.randint(1, 2)
        block = write(rng, [(rng.choice(NAMES), make_args(rng, texts)) for _ in range(calls)])
        out += block
    return out, calls, block


class Trace(NamedTuple):
    fmt: str
    info: TokenizerInfo
    dec: RowDecoder  # the shard's decoder for its tokenizer, built with the trace
    reqs: list[list[int]]  # per request, its ids
    order: list[tuple[int, list[int]]]  # (request, row ids), interleaved as a scheduler would
    calls: int  # written
    total: int  # ids
    call_ids: int  # ids of the call blocks (each encoded alone: about)
    refs: dict[str, list[ParsedDelta]]  # per configuration, each request's parse_full


def trace(fmt: str, n: int, concurrency: int, max_row: int, seed: int,
          texts: str = "auto", args: str = "short") -> Trace:
    specials, write = WRITERS[fmt]
    info = tokenizer(specials)
    rng = random.Random(seed)
    words = corpus(seed, texts)
    outs = [output(rng, words, write, ARGS[args]) for _ in range(n)]
    reqs = [info.tokenizer.encode(o, add_special_tokens=False).ids for o, _, _ in outs]
    call_ids = sum(len(info.tokenizer.encode(b, add_special_tokens=False).ids)
                   for _, _, b in outs if b)
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
    return Trace(fmt, info, per_row_decoder(info), reqs, order,
                 sum(c for _, c, _ in outs), sum(map(len, reqs)), call_ids, {})


class Bench(NamedTuple):
    label: str
    fmt: str  # whose trace
    config: dict[str, Any]  # make_parsed_stream's and OPEN's options
    off: dict[str, Any]  # the baseline's OPEN options (no parser)


def benches(names: list[str]) -> list[Bench]:
    out = []
    for fmt in names:
        for mode in ("incremental", "whole"):
            out.append(Bench(f"{fmt}/{mode}", fmt, {"tool_parser": fmt, "tool_stream": mode,
                                                    "tools": TOOLS}, {}))
    if "deepseekv4" in names:  # reasoning, and service stop strings, on the DSML trace
        stop = ["<<never>>", "\n\n\n\n"]
        out += [Bench("deepseek-r1", "deepseekv4", {"reasoning_parser": "deepseek-r1"}, {}),
                Bench("r1+deepseekv4", "deepseekv4", {"reasoning_parser": "deepseek-r1",
                                                      "tool_parser": "deepseekv4"}, {}),
                Bench("r1+v4+stop", "deepseekv4", {"reasoning_parser": "deepseek-r1",
                                                   "tool_parser": "deepseekv4", "stop": stop},
                      {"stop": stop})]
    return out


# ------------------------------------------------------------------ direct: decoder + parser
def run(tr: Trace, config: dict[str, Any] | None,
        stop: list[str] | None = None) -> tuple[float, list[Any]]:
    """Seconds for the whole trace; per request, what came out.

    `config` None: the decoder alone, plus the service's StopMatcher when `stop` is given
    (what the shard does for such a request).
    """
    info, reqs, order = tr.info, tr.reqs, tr.order
    n = len(reqs)
    keep: frozenset[int] = frozenset()
    parsers: list[Any] = [None] * n
    if config is not None:
        keep = marker_token_ids(info, make_parsed_stream(**config).markers)
    left = [len(ids) for ids in reqs]
    t0 = time.process_time()
    dec, state = tr.dec, Slots(n)  # the shard's decoder, a slot per request
    start = dec.start(Open("r"), keep)
    for r in range(n):
        state.bind_plain(r, "r", start, 0, 0, 0)
    push = dec.push

    def flush(r: int) -> str:
        return held(dec, state, r)

    outs: list[Any] = [[] for _ in range(n)]
    if config is None and stop:
        matchers = [StopMatcher(stop) for _ in range(n)]
        for r, ids in order:
            outs[r].append(matchers[r].feed(push(state, r, ids))[0])
            left[r] -= len(ids)
            if not left[r]:
                outs[r].append(matchers[r].feed(flush(r), True)[0])
    elif config is None:
        for r, ids in order:
            outs[r].append(push(state, r, ids))
            left[r] -= len(ids)
            if not left[r]:
                outs[r].append(flush(r))
    else:
        parsers = [make_parsed_stream(**config) for _ in range(n)]
        for r, ids in order:
            p = parsers[r]
            outs[r].append(p.feed(push(state, r, ids)))
            left[r] -= len(ids)
            if not left[r]:
                outs[r].append(p.feed(flush(r)))
                outs[r].append(p.finish())
    return time.process_time() - t0, outs


def held(dec: RowDecoder, state: Slots, slot: int) -> str:
    """What a slot still holds at its request's end."""
    return "".join(dec.flush(state, [0], np.array([slot], np.int64))[1])


def direct_check(tr: Trace, b: Bench, outs: list[Any]) -> int:
    return sum(merge(outs[r]) != want for r, want in enumerate(references(tr, b.config)))


# ------------------------------------------------------------------ the shard's table
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


def routed(tr: Trace) -> list[link.Arrays]:
    """The trace's frames as the egress routes them to one shard (ARRAYS messages)."""
    return route_arrays(frames_of(tr.reqs, tr.order), [f"r{r}" for r in range(len(tr.reqs))])


def per_row_decoder(info: TokenizerInfo) -> RowDecoder:
    """The tokenizer's per-row decoder, built once per tokenizer for the whole run (its
    tables are read-only, a request's state lives in its slot): building one costs more
    than a short table run."""
    made = _PER_ROW.get(id(info))
    if made is None or made[0] is not info:
        made = _PER_ROW[id(info)] = (info, decoders_for(info).per_row)
    return made[1]


_PER_ROW: dict[int, tuple[TokenizerInfo, RowDecoder]] = {}


def plainless_table(info: TokenizerInfo, size: int) -> RidTable:
    """A RidTable without an array decoder, as for a tokenizer the array path cannot decode:
    a request without options then runs the same per-row machinery (Request.row) a parsed
    one does."""
    table = RidTable(info, 0, max_requests=size, ended_memory=size,
                     decoders=Decoders(None, per_row_decoder(info)))
    assert table.decoder is None and table._fresh is None
    return table


def run_table(tr: Trace, msgs: list[link.Arrays],
              opts: dict[str, Any]) -> tuple[float, float, dict[str, list[Delta]]]:
    """Seconds the shard spends on the whole trace (OPENs not timed), every request on the
    per-row path: in `RidTable.on_arrays` alone, and in all of `Shard.on_frame`'s work for
    an ARRAYS message (the output sink of the default output format, PACKED, and the
    output frame encoded), which a shard pays per message whatever its requests ask for.
    The deltas come back from the encoded frames, so the exactness check reads what a
    frontend would."""
    n = len(tr.reqs)
    table = plainless_table(tr.info, n + 1)
    for r in range(n):
        sink = DeltasOut()
        table.on_open(Open(f"r{r}", **opts), sink)
        assert not sink, sink
    frames: list[bytes] = []
    in_table = 0.0
    clock = time.process_time
    gc.collect()  # every run starts from the same heap: a collection is not charged to one
    t0 = clock()
    for seq, msg in enumerate(msgs):
        out = output_sink(OUTPUT_FORMAT)
        t = clock()
        table.on_arrays(msg, out)
        in_table += clock() - t
        frames.append(encode_output(OUTPUT_FORMAT, 0, seq, out))
    whole = clock() - t0
    assert table.paths.get("array", 0) == 0, table.paths
    per: dict[str, list[Delta]] = {}
    for frame in frames:
        decoded = decode_output(frame)
        assert isinstance(decoded, Packed)
        for d in decoded.deltas:
            per.setdefault(d.rid, []).append(d)
    return in_table, whole, per


def table_check(tr: Trace, b: Bench, per: dict[str, list[Delta]]) -> int:
    bad = 0
    for r, want in enumerate(references(tr, b.config)):
        ds = per.get(f"r{r}", [])
        got = merge([ParsedDelta(d.text, d.reasoning, d.tool_calls) for d in ds])
        ended = bool(ds and ds[-1].finish is not None and ds[-1].finish.tool_calls)
        if not ds or ds[-1].finish is None or (
                got.text, got.reasoning, got.tool_calls, ended) != (
                want.text, want.reasoning, want.tool_calls, want.ended_with_tool_calls):
            bad += 1
    return bad


def references(tr: Trace, config: dict[str, Any]) -> list[ParsedDelta]:
    """What each request must come to: the parser on the whole decode, markers kept."""
    key = json.dumps(config, sort_keys=True)
    refs = tr.refs.get(key)
    if refs is None:
        ref = make_parsed_stream(**config)
        keep = marker_token_ids(tr.info, ref.markers)
        refs = tr.refs[key] = [ref.parse_full(tr.info.tokenizer.decode(
            [i for i in ids if i not in tr.info.special_ids or i in keep],
            skip_special_tokens=False)) for ids in tr.reqs]
    return refs


def timing_cols(off: float, on: float, ids: int) -> str:
    """ns per id without and with the parser, and their ratio."""
    return f"{off / ids * 1e9:>10.0f} {on / ids * 1e9:>10.0f} {on / off:>5.2f}x "


def measure(args: argparse.Namespace) -> int:
    names, missing = formats()
    if args.formats:
        names = [f for f in names if f in args.formats.split(",")]
    todo = benches(names)
    if args.only:
        todo = [b for b in todo if any(o in b.label for o in args.only.split(","))]
    where = ("decoder + ParsedStream alone" if args.direct else
             "shard, per-row path")
    bad = 0
    # per label, its ratios: on_arrays (into the shard's output sink), and the shard's
    # whole work per message (that and the frame's encoding)
    summary: dict[str, list[float]] = {}
    shard_summary: dict[str, list[float]] = {}
    for max_row in (1, 4):
        print(f"\n{where}: {args.requests} requests per format, rows of 1..{max_row} ids, "
              f"{corpus_name(args.corpus)} texts, {args.args} arguments")
        timing = f"{'off ns/id':>10} {'on ns/id':>10} {'ratio':>6} "
        if not args.direct:
            print(f"{'':<43} {'on_arrays, ' + OUTPUT_FORMAT + ' sink':^28}"
                  f"{'+ frame encoded':^28}")
        print(f"{'parser':<26} {'ids':>7} {'in calls':>8} "
              f"{timing if args.direct else timing * 2}{'calls found':>12}")
        traces: dict[str, tuple[Trace, list[link.Arrays]]] = {}
        for b in todo:
            if b.fmt not in traces:
                tr = trace(b.fmt, args.requests, args.concurrency, max_row, args.seed,
                           args.corpus, args.args)
                traces[b.fmt] = (tr, [] if args.direct else routed(tr))
                # as a shard does after start-up (process.freeze_heap): the tokenizer's
                # tables and the trace out of the collector's reach, or a full collection
                # walks them (tens of ms) in whichever run crosses its threshold
                freeze_heap()
            tr, msgs = traces[b.fmt]
            base = best = base_all = best_all = float("inf")
            for _ in range(args.repeat):  # alternate, so both see the same machine state
                if args.direct:
                    base = min(base, run(tr, None, b.off.get("stop"))[0])
                    dt, outs = run(tr, b.config)
                else:
                    off_table, off_all, _ = run_table(tr, msgs, b.off)
                    dt, dt_all, per = run_table(tr, msgs, b.config)
                    base, base_all = min(base, off_table), min(base_all, off_all)
                    best_all = min(best_all, dt_all)
                best = min(best, dt)
            bad += direct_check(tr, b, outs) if args.direct else table_check(tr, b, per)
            found = sum(len([c for c in ref.tool_calls or () if c.name is not None])
                        for ref in references(tr, b.config))
            summary.setdefault(b.label, []).append(best / base)
            row = (f"{b.label:<26} {tr.total:>7} {tr.call_ids / tr.total:>8.0%} "
                   + timing_cols(base, best, tr.total))
            if not args.direct:
                shard_summary.setdefault(b.label, []).append(best_all / base_all)
                row += timing_cols(base_all, best_all, tr.total)
            calls = f"{found}/{tr.calls}" if "tool_parser" in b.config else ""
            print(f"{row}{calls:>12}", flush=True)
    for name, ratios in (("direct" if args.direct else "on_arrays", summary),
                         ("with the frame encoded", shard_summary)):
        worst = max(ratios.items(), key=lambda kv: max(kv[1]), default=None)
        if worst is not None:
            print(f"\nworst ratio, {name}: {worst[0]} {max(worst[1]):.2f}x (target <= 1.3x)",
                  end="")
    print()
    if missing:
        print(f"no trace writer (add one to WRITERS): {', '.join(missing)}")
    print(f"exactness: {'all requests equal parse_full' if not bad else f'{bad} differ'}")
    return 1 if bad else 0


# --latency: one call writing a long string argument `content`, per format; the markers
# that are special tokens in each format's own model are made special tokens of the
# DeepSeek-V4 tokenizer, so a marker is one id as it is in production
LONG = "".join(f"def f{i}(x):\n    return x * {i}  # 值 {i} 🙂\n" for i in range(60))
XML_SPECIALS = ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                "</arg_value>", "<minimax:tool_call>", "</minimax:tool_call>", "[TOOL_CALLS]",
                "[ARGS]"]
DSML_CALL = ('<｜DSML｜{W}>\n<｜DSML｜invoke name="write">\n<｜DSML｜parameter name="content" '
             'string="true">{RAW}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜{W}>')
LATENCY_CALLS: dict[str, tuple[dict[str, Any], str]] = {
    # config, the output: {RAW} is LONG as written, {ARGS} the JSON arguments object,
    # {PY} LONG as a Python literal
    "deepseekv4": ({"reasoning_parser": "deepseek-r1", "reasoning_started": False,
                    "tool_parser": "deepseekv4"}, DSML_CALL.replace("{W}", "tool_calls")),
    "deepseekv32": ({"reasoning_parser": "deepseek-r1", "reasoning_started": False,
                     "tool_parser": "deepseekv32"}, DSML_CALL.replace("{W}", "function_calls")),
    "deepseekv3": ({"tool_parser": "deepseekv3"},
                   "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write\n"
                   "```json\n{ARGS}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "deepseekv31": ({"tool_parser": "deepseekv31"},
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write<｜tool▁sep｜>{ARGS}"
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "hermes": ({"tool_parser": "hermes"},
               '<tool_call>\n{"name": "write", "arguments": {ARGS}}\n</tool_call>'),
    "mistral": ({"tool_parser": "mistral"},
                '[TOOL_CALLS] [{"name": "write", "arguments": {ARGS}}]'),
    "mistral v11": ({"tool_parser": "mistral"}, "[TOOL_CALLS]write[ARGS]{ARGS}"),
    "qwen3_coder": ({"tool_parser": "qwen3_coder"},
                    "<tool_call>\n<function=write>\n<parameter=content>\n{RAW}\n</parameter>\n"
                    "</function>\n</tool_call>"),
    "glm45": ({"tool_parser": "glm45"}, "<tool_call>write\n<arg_key>content</arg_key>\n"
              "<arg_value>{RAW}</arg_value>\n</tool_call>"),
    "glm47": ({"tool_parser": "glm47"}, "<tool_call>write<arg_key>content</arg_key>"
              "<arg_value>{RAW}</arg_value></tool_call>"),
    "minimax_m2": ({"tool_parser": "minimax_m2"},
                   '<minimax:tool_call>\n<invoke name="write">\n<parameter name="content">'
                   "{RAW}</parameter>\n</invoke>\n</minimax:tool_call>"),
    "kimi_k2": ({"reasoning_parser": "kimi_k2", "tool_parser": "kimi_k2"},
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.write:0"
                "<|tool_call_argument_begin|>{ARGS}<|tool_call_end|><|tool_calls_section_end|>"),
    "gpt-oss": ({"reasoning_parser": "gpt-oss", "tool_parser": "gpt-oss"},
                "<|start|>assistant<|channel|>commentary to=functions.write <|constrain|>json"
                "<|message|>{ARGS}<|call|>"),
    "llama3_json": ({"tool_parser": "llama3_json"},
                    '<|python_tag|>{"name": "write", "parameters": {ARGS}}'),
    "pythonic": ({"tool_parser": "pythonic"}, "[write(content={PY})]"),
}
WRITE_TOOL = [{"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"content": {"type": "string"}}}}}]


def latency_mode(info: TokenizerInfo) -> int:
    """--latency: rows of 1 id, a call whose only argument is a long string (LONG): how
    many ids after the name's text the name's delta leaves, and after that delta the first
    arguments bytes and the first bytes of the value; per format and tool_stream mode (the
    request's `tools` declare `content` a string)."""
    markers = sorted(set(XML_SPECIALS) | {
        m for config, _ in LATENCY_CALLS.values()
        for m in make_parsed_stream(**config).markers if m.startswith("<|")})
    tok = with_special_tokens(info.tokenizer, markers)
    info = describe(tok, "deepseek-v4+markers")
    print(f"{'parser':<12} {'mode':<12} {'call ids':>9} {'name after':>10} {'args after':>10} "
          f"{'value after':>11}  (ids; name after its text, the others after the name's delta)")
    prefix = len(json.dumps({"content": ""})) - 2  # `{"content": "`
    for name, (config, shape) in LATENCY_CALLS.items():
        text = shape.replace("{ARGS}", json.dumps({"content": LONG}, ensure_ascii=False))
        text = text.replace("{PY}", repr(LONG)).replace("{RAW}", LONG)
        ids = tok.encode(text, add_special_tokens=False).ids
        name_end = text.index("write") + len("write")
        for mode in ("incremental", "whole"):
            p = make_parsed_stream(**config, tool_stream=mode, tools=WRITE_TOOL)
            dec, state = per_row_decoder(info), Slots(1)  # a request's decoding, markers kept
            state.bind_plain(0, "r", dec.start(Open("r"), marker_token_ids(info, p.markers)),
                             0, 0, 0)
            seen, args, at = "", "", {}
            for n, i in enumerate(ids):
                seen += (piece := dec.push(state, 0, [i]))
                if "text" not in at and len(seen) >= name_end:
                    at["text"] = n
                for c in p.feed(piece).tool_calls or ():
                    if c.name is not None:
                        at.setdefault("name", n)
                    if c.arguments:
                        at.setdefault("args", n)
                        args += c.arguments
                        if len(args) > prefix:
                            at.setdefault("value", n)
            named = at.get("name", -1)
            print(f"{name:<12} {mode:<12} {len(ids):>9} {named - at.get('text', -1):>10} "
                  f"{at.get('args', -1) - named:>10} {at.get('value', -1) - named:>11}")
    covered = {c["tool_parser"] for c, _ in LATENCY_CALLS.values()}
    aliases = {n for n in FORMATS if n not in covered
               and any(FORMATS[n] is FORMATS[c] for c in covered)}
    missing = sorted(set(FORMATS) - covered - aliases)
    print(f"aliases of a format above: {', '.join(sorted(aliases))}")
    if missing:
        print(f"no latency case (add one to LATENCY_CALLS): {', '.join(missing)}")
    return 1 if missing else 0


def main(args: argparse.Namespace) -> int:
    """`scripts/bench/parsers.py`: --latency, or the cost table (direct, or --table)."""
    if args.latency:
        return latency_mode(load("deepseek-v4"))
    args.direct = not args.table
    return measure(args)


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/parsers.py` (its `main` parses them)."""
    ap.add_argument("--requests", type=int, default=400, help="per format")
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=9,
                    help="best of N alternating runs (on a shared host a best of few "
                         "moves one configuration's ratio by much more than of many)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--table", action="store_true",
                    help="through the shard's RidTable.on_arrays (ARRAYS messages, OPEN "
                         "options, Deltas), every request per row: parser on vs the same "
                         "requests without it (what a parser costs)")
    ap.add_argument("--formats", default="", help="comma-separated format names (default all)")
    ap.add_argument("--args", choices=sorted(ARGS), default="short",
                    help="short: a query, a limit, sometimes a line of code; files: every "
                         "call writes a file of 20-60 lines (a coding agent)")
    ap.add_argument("--corpus", choices=("auto", "faker", "builtin"), default="auto",
                    help="the texts outputs are made of (see `corpus`; auto: faker if "
                         "installed); the `in calls` column is the share of ids in calls")
    ap.add_argument("--only", default="", help="comma-separated label substrings")
    ap.add_argument("--latency", action="store_true",
                    help="first-fragment latency in ids for a long string argument, per "
                         "format and tool_stream mode")
