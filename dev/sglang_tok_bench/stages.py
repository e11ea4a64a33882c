"""Stage ceilings: the per-row cost of each stage of the pipeline alone, and what it implies
(`scripts/bench/stages.py`; `scripts/bench/against.py` runs its measures against another
checkout, by these names: `make_trace`, `shard_messages`, `own_rows`, `measure_egress`,
`measure_shard`, `measure_decodestream`).

The service is a pipeline (egress -> N shards -> frontend); on 2 shared cores the end-to-end
figures only say which stage is on the CPU. Measured here, one stage at a time, in this
process, as CPU time of this thread (best of --repeat runs, since the machine is shared):

- egress: `Egress.on_frame` on every frame of the trace, its links replaced by sinks that
  only record what they are given (no ZeroMQ, no shard reading them);
- shard: `Shard.on_frame` on the link messages the egress recorded for shard 0 (with 1
  shard: every row; with 2: about half of them),
  its output socket replaced by a sink; decoding, bookkeeping and output encoding included;
- frontend: `protocol.decode_output` on that shard's output messages, then every row handed
  to its rid's list (the least a frontend does with a delta), for DELTAS and COLUMNS.

From these, a model of the service on C cores (1 egress, C - 1 shards): the egress sends
each shard only its own rows (ARRAYS), so N shards give N / r rows/s (r: a shard's cost
per own row), and the egress gives 1 / e. The smaller one saturates first. Each figure is
also given against one `tokenizers` DecodeStream.step per id, measured in the same run.

--small-frames: egress and shard CPU per BATCH frame at 16 concurrent requests (frames of
~15 rows, trace a's shape: 1 id per row, 5% with top-5 logprobs). Whole-array operations
have a fixed cost per call, so a small frame pays in calls what a large one pays in work.
It runs the egress and shard stages above on such a trace, and the shard's whole loop step
(`Shard.handle`: parse, decode, acknowledgement, metrics), and prints microseconds per frame.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, cast

from prometheus_client import REGISTRY

from egress.main import Egress
from ring import link
from sglang_tok.config import Config, OutputFormat, finalize
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule
from sglang_tok.process import Status, service_roles
from sglang_tok.protocols.model import columns, control, output, packed, tags
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_bench.figures import markdown
from sglang_tok_bench.frame_rows import batch_rows, decodestream_rows
from sglang_tok_bench.timing import best
from sglang_tok_testkit.processes import workdir
from shards.main import Shard

CORES = (2, 4, 8, 16, 64)
# a trace's requests, concurrency, ids per row and share of rows with top-5 logprobs
TraceSpec = tuple[int, int, int, float]


@dataclass
class Trace:
    name: str
    frames: list[bytes]
    rows: int
    ids: int


def make_trace(info: TokenizerInfo, name: str, requests: int, concurrency: int,
               ids_per_row: int, logprob_share: float) -> Trace:
    spec = PlanSpec(requests=requests, concurrency=concurrency,
                    ids_per_row=(ids_per_row, ids_per_row), min_tokens=32, max_tokens=256,
                    logprob_share=logprob_share, top_k=5, seed=1)
    frames: list[bytes] = []
    rows = ids = 0
    for step in schedule(make_requests(info, spec), concurrency, spec.seed, 5):
        frames += step.opens
        if step.batch is not None:
            frames.append(step.batch)
        frames += step.ends
        rows += step.rows
        ids += step.tokens
    return Trace(name, frames, rows, ids)


class Recorder:
    """Stands in for a socket: keeps what is sent (or only counts it)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.sent: list[bytes] = []
        self.count = 0

    def send(self, msg: bytes, flags: int = 0) -> None:
        self.count += 1
        if self.keep:
            self.sent.append(msg)

    def close(self, linger: int | None = None) -> None:
        pass


class Outs:
    """Stands in for `PushTo`: every endpoint is the one recorder."""

    def __init__(self, sink: Recorder) -> None:
        self.sink = sink

    def __getitem__(self, endpoint: str | None) -> Recorder:
        return self.sink

    def close(self, linger: int | None = None) -> None:
        pass


def config(shards: int, fmt: str, runtime: str) -> Config:
    return finalize(Config(shards=shards, runtime_dir=runtime, http="127.0.0.1:0", pin=False,
                           output_format=cast(OutputFormat, fmt), log_level="WARNING"))


def fresh_metrics() -> None:
    """Each process of the service makes its metrics once; here we make a stage many times."""
    for c in list(REGISTRY._collector_to_names):
        REGISTRY.unregister(c)


class EgressStage:
    def __init__(self, cfg: Config, frames: Sequence[bytes], keep: bool) -> None:
        self.cfg, self.frames, self.keep = cfg, frames, keep
        self.eg: Egress | None = None

    def setup(self) -> None:
        if self.eg is not None:
            self.eg.ctx.destroy(linger=0)
        fresh_metrics()
        eg = self.eg = Egress(self.cfg, Status(len(service_roles(self.cfg.shards))))
        self.sinks = [Recorder(self.keep) for _ in range(self.cfg.shards)]
        eg.links = self.sinks  # type: ignore[assignment]
        out = Recorder(False)
        eg.out = out  # type: ignore[assignment]
        eg.outs = Outs(out)  # type: ignore[assignment]
        eg.up = [True] * self.cfg.shards

    def run(self) -> None:
        """Every frame, then every shard acknowledges what it was sent, as a shard keeping
        up would (the ledger of endings in flight stays short)."""
        assert self.eg is not None
        on_frame, router = self.eg.on_frame, self.eg.router
        acked, routed, shards = router.acked, router.routed, range(self.cfg.shards)
        for f in self.frames:
            on_frame(memoryview(f))
            for k in shards:
                acked(k, routed[k], routed[k])  # one output message per message


def measure_egress(tr: Trace, shards: int, repeat: int, runtime: str) -> float:
    st = EgressStage(config(shards, "deltas", runtime), tr.frames, False)
    return best(st.run, repeat, st.setup) / tr.rows


def shard_messages(tr: Trace, shards: int, runtime: str) -> list[bytes]:
    st = EgressStage(config(shards, "deltas", runtime), tr.frames, True)
    st.setup()
    st.run()
    return [m for m in st.sinks[0].sent if m[:1] in (b"F", b"A")]


class ShardStage:
    def __init__(self, cfg: Config, info: TokenizerInfo, msgs: list[bytes], keep: bool) -> None:
        self.cfg, self.info, self.msgs, self.keep = cfg, info, msgs, keep
        self.sh: Shard | None = None

    def setup(self) -> None:
        if self.sh is not None:
            self.sh.ctx.destroy(linger=0)
        fresh_metrics()
        sh = self.sh = Shard(self.cfg, Status(len(service_roles(self.cfg.shards))), 0, self.info,
                             os.getpid())
        self.out = Recorder(self.keep)
        sh.out = self.out  # type: ignore[assignment]
        sh.outs = Outs(self.out)  # type: ignore[assignment]
        sh.back = Recorder(False)  # type: ignore[assignment]

    def run(self) -> None:
        assert self.sh is not None
        on_frame, parse = self.sh.on_frame, link.parse
        for m in self.msgs:
            msg = parse(m)
            assert isinstance(msg, (link.Frame, link.Arrays))
            on_frame(msg)


def own_rows(msgs: list[bytes]) -> tuple[int, int]:
    """(rows shard 0 owns, rows it read) in its link messages: the egress sends each shard
    only its own rows (ARRAYS), so the two are equal."""
    own = sum(int.from_bytes(m[9:13], "little") for m in msgs if m[:1] == b"A")
    return own, own


def measure_shard(info: TokenizerInfo, msgs: list[bytes], fmt: str, repeat: int,
                  runtime: str) -> tuple[float, list[bytes]]:
    st = ShardStage(config(1, fmt, runtime), info, msgs, False)
    t = best(st.run, repeat, st.setup)
    st.keep = True
    st.setup()
    st.run()
    return t / own_rows(msgs)[0], st.out.sent


def measure_parse(msgs: list[bytes], repeat: int) -> float:
    """What a shard pays per own row to read its link messages (part of its per-row cost)."""
    parse = link.parse

    def run() -> None:
        for m in msgs:
            parse(m)
    return best(run, repeat) / own_rows(msgs)[1]


def measure_decodestream(info: TokenizerInfo, frames: Sequence[bytes], repeat: int) -> float:
    """The lean peer's unit of work: one `tokenizers` DecodeStream.step, per id."""
    rows = [batch_rows(f) for f in frames]
    total = sum(len(x) for rs in rows for _, x in rs)
    return best(lambda: decodestream_rows(info.tokenizer, rows), repeat) / total


def demux_deltas(msgs: list[bytes], states: dict[str, list[Any]]) -> None:
    decode, get = output.decode_output, states.__getitem__
    for raw in msgs:
        for d in decode(raw).deltas:  # type: ignore[union-attr]
            get(d.rid).append(d)


def demux_deltas_c(msgs: list[bytes], states: dict[str, list[Any]]) -> None:
    """Each delta's text to its rid with `map`: the DELTAS counterpart of demux_columns_c."""
    decode, get, append = output.decode_output, states.__getitem__, list.append
    rid_of, text_of = attrgetter("rid"), attrgetter("text")
    for raw in msgs:
        deltas = decode(raw).deltas  # type: ignore[union-attr]
        for _ in map(append, map(get, map(rid_of, deltas)), map(text_of, deltas)):
            pass


def demux_columns(msgs: list[bytes], states: dict[str, list[Any]]) -> None:
    decode, get = output.decode_output, states.__getitem__
    for raw in msgs:
        m = decode(raw)
        assert isinstance(m, columns.Columns)
        for row in m.rows():
            get(row[0]).append(row)


def demux_columns_c(msgs: list[bytes], states: dict[str, list[Any]]) -> None:
    """Each row's text to its rid with `map` (no Python step per row); ids stay one flat
    column per message, with `id_lens` (what a frontend that streams text needs)."""
    decode, get, append = output.decode_output, states.__getitem__, list.append
    for raw in msgs:
        m = decode(raw)
        assert isinstance(m, columns.Columns)
        for _ in map(append, map(get, m.rids), m.texts):
            pass


def demux_packed_c(msgs: list[bytes], states: dict[str, list[Any]]) -> None:
    """PACKED: one UTF-8 decode per message, texts cut at C speed, each to its rid by map."""
    decode, get, append = output.decode_output, states.__getitem__, list.append
    for raw in msgs:
        m = decode(raw)
        assert isinstance(m, packed.Packed)
        for _ in map(append, map(get, m.rids), m.texts()):
            pass


def measure_client(msgs: list[bytes], repeat: int, runtime: str, read: bool = False) -> float:
    """The kit's asyncio `Client.dispatch` (what a frontend built on the kit runs per
    message), every rid registered, no consumer waiting; per delta. With `read`, each
    stream's consumer work too: every queued delta made into its Delta (a PACKED row's
    text, ids and logprob lists are made when read)."""
    from sglang_tok.kit.client import Client, _delta

    rids: list[str] = []
    for raw in msgs:
        rids += [d.rid for d in deltas_of(raw)]
    client = Client(f"ipc://{runtime}/bench-client.ipc", 1, queue_limit=1 << 30)

    def setup() -> None:
        client.streams.clear()
        client._ended.clear()
        for rid in dict.fromkeys(rids):
            client.stream(rid)

    def run() -> None:
        for raw in msgs:
            client.dispatch(raw)
        if read:
            for s in client.streams.values():
                for item in s._queue:
                    _delta(item)
    t = best(run, repeat, setup)
    client.sock.close(linger=0)
    return t / len(rids)


def measure_frontend(msgs: list[bytes], fn: Callable[[list[bytes], dict[str, list[Any]]], None],
                     repeat: int) -> float:
    rids: dict[str, list[Any]] = {}
    rows = 0
    for raw in msgs:
        for d in deltas_of(raw):
            rids[d.rid] = []
            rows += 1

    def run() -> None:
        for v in rids.values():
            v.clear()
        fn(msgs, rids)
    return best(run, repeat) / rows


def deltas_of(raw: bytes) -> list[Any]:
    """An output message's deltas (none in a PONG or a RESTARTED)."""
    m = output.decode_output(raw)
    return [] if isinstance(m, (control.Pong, control.Restarted)) else list(m.deltas)


def decode_only(msgs: list[bytes], repeat: int) -> float:
    rows = sum(len(deltas_of(m)) for m in msgs)
    decode = output.decode_output

    def run() -> None:
        for m in msgs:  # each message dropped after decoding, as a frontend would
            decode(m)
    return best(run, repeat) / rows


def model(e: float, h: float, r: float, ids_per_row: float) -> list[str]:
    lines = []
    for c in CORES:
        n = max(1, c - 1)
        eg, sh = 1 / e, 1 / (h + r / n)
        first = "egress" if eg < sh else "shards"
        lines.append([str(c), str(n), f"{eg / 1e6:.2f}", f"{sh / 1e6:.2f}", first,
                      f"{min(eg, sh) * ids_per_row / 1e6:.2f}"])
    return markdown(["cores", "shards", "egress Mrows/s", "shards Mrows/s", "saturates first",
                     "M ids/s"], lines).splitlines()


def run_only(a: argparse.Namespace, info: TokenizerInfo, specs: dict[str, TraceSpec],
             runtime: str) -> int:
    """--only: one stage on the first trace, over and over for --seconds (for py-spy)."""
    tr = make_trace(info, "a", *specs[a.traces.split(",")[0]])
    stage: EgressStage | ShardStage = (
        EgressStage(config(a.shards, "deltas", runtime), tr.frames, False)
        if a.only == "egress" else
        ShardStage(config(1, "deltas", runtime), info, shard_messages(tr, a.shards, runtime),
                   False))
    print(f"running {a.only} (pid {os.getpid()}) for {a.seconds}s", flush=True)
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        stage.setup()
        stage.run()
    return 0


def measure_stages(info: TokenizerInfo, tr: Trace, repeat: int,
                   runtime: str) -> dict[str, float]:
    """Every figure of one trace, seconds per row (per id, per delta where so named)."""
    f: dict[str, float] = {"e1": measure_egress(tr, 1, repeat, runtime),
                           "e2": measure_egress(tr, 2, repeat, runtime)}
    m1, m2 = shard_messages(tr, 1, runtime), shard_messages(tr, 2, runtime)
    f["h"] = measure_parse(m1, repeat)
    f["step"] = measure_decodestream(info, tr.frames, repeat)
    outs: dict[str, list[bytes]] = {}
    for key, fmt in (("s1", "deltas"), ("s1c", "columnar"), ("s1p", "packed")):
        f[key], outs[fmt] = measure_shard(info, m1, fmt, repeat, runtime)
    f["s2"], _ = measure_shard(info, m2, "deltas", repeat, runtime)
    f["own2"] = own_rows(m2)[0]
    out_d, out_c, out_p = outs["deltas"], outs["columnar"], outs["packed"]
    f["fd"] = measure_frontend(out_d, demux_deltas, repeat)
    f["fc"] = measure_frontend(out_c, demux_columns, repeat)
    f["fcc"] = measure_frontend(out_c, demux_columns_c, repeat)
    f["fpc"] = measure_frontend(out_p, demux_packed_c, repeat)
    f["kit_p"] = measure_client(out_p, repeat, runtime)
    f["kit_c"] = measure_client(out_c, repeat, runtime)
    f["kit_pr"] = measure_client(out_p, repeat, runtime, read=True)
    f["kit_cr"] = measure_client(out_c, repeat, runtime, read=True)
    f["fdc"] = measure_frontend(out_d, demux_deltas_c, repeat)
    f["dd"], f["dc"] = decode_only(out_d, repeat), decode_only(out_c, repeat)
    return f


STAGE_ROWS = [
    ("e1", "egress, 1 shard (decode_batch + route + link message)"),
    ("e2", "egress, 2 shards"),
    ("s1", "shard, 1 shard, DELTAS out (per row)"),
    ("s1c", "shard, 1 shard, COLUMNS out (per row)"),
    ("s1p", "shard, 1 shard, PACKED out (per row)"),
    ("s2", "shard 0 of 2, DELTAS out (per own row; {own2}/{rows} rows its own)"),
    ("h", "shard: reading its link messages (per own row, included above)"),
    ("step", "lean peer: one DecodeStream.step (per id)"),
    ("dd", "frontend: decode DELTAS only"),
    ("dc", "frontend: decode COLUMNS only"),
    ("fd", "frontend: DELTAS decode + each delta to its rid"),
    ("fc", "frontend: COLUMNS decode + each row to its rid (for loop)"),
    ("fdc", "frontend: DELTAS decode + each text to its rid (map)"),
    ("fcc", "frontend: COLUMNS decode + each text to its rid (map)"),
    ("fpc", "frontend: PACKED decode + each text to its rid (map)"),
    ("kit_p", "frontend: the kit's Client.dispatch, PACKED (per delta)"),
    ("kit_c", "frontend: the kit's Client.dispatch, COLUMNS (per delta)"),
    ("kit_pr", "frontend: dispatch + every delta read, PACKED (per delta)"),
    ("kit_cr", "frontend: dispatch + every delta read, COLUMNS (per delta)"),
]


def print_stages(tr: Trace, f: dict[str, float]) -> None:
    per_row, step = tr.ids / tr.rows, f["step"]
    own2 = int(f["own2"])
    print(markdown(["stage", "us/row"],
                   [(title.format(own2=own2, rows=tr.rows), f"{f[key] * 1e6:.3f}")
                    for key, title in STAGE_ROWS]))
    print(f"\nratios to one DecodeStream.step per id: shard row (COLUMNS out) "
          f"{f['s1c'] / per_row / step:.2f}x, (PACKED out) {f['s1p'] / per_row / step:.2f}x, "
          f"egress row (2 shards) {f['e2'] / per_row / step:.2f}x")
    r = min(f["s1c"], f["s1p"])
    print(f"\nmodel (shards: r={r * 1e6:.3f}/N us per row, best output format: each "
          f"shard reads only its own rows; check: 2 shards modelled {r / 2 * 1e6:.3f}, "
          f"measured DELTAS {f['s2'] * own2 / tr.rows * 1e6:.3f} us per frame row); the "
          f"frontend is not on these cores: one frontend core takes "
          f"{1 / f['fpc'] / 1e6:.2f} M deltas/s (PACKED), {1 / f['fcc'] / 1e6:.2f} M (COLUMNS) "
          f"or {1 / f['fdc'] / 1e6:.2f} M (DELTAS), texts to rids by map")
    print("\n".join(model(f["e2"], 0.0, r, per_row)))


def loop_step(info: TokenizerInfo, msgs: list[bytes], fmt: str, runtime: str
              ) -> tuple[Callable[[], None], Callable[[], None]]:
    """(run, setup) of a shard's `handle` on every message, as its loop calls it: what a
    message costs beyond `on_frame` (its acknowledgement to the egress and the metrics)
    shows at small frames, where each message comes alone."""
    stage = ShardStage(config(1, fmt, runtime), info, msgs, False)

    def setup() -> None:
        stage.setup()
        assert stage.sh is not None
        stage.sh.started = True

    def run() -> None:
        assert stage.sh is not None
        handle = stage.sh.handle
        for m in msgs:
            handle(m)

    return run, setup


def small_frames(a: argparse.Namespace, info: TokenizerInfo, runtime: str) -> int:
    """--small-frames: egress, shard and the shard's loop step, microseconds per frame."""
    repeat = a.repeat or 7
    tr = make_trace(info, "a", a.small_requests, a.small_concurrency, 1, 0.05)
    frames = sum(1 for f in tr.frames if f[0] == tags.TAG_BATCH)
    egress = measure_egress(tr, 1, repeat, runtime) * tr.rows / frames
    msgs = shard_messages(tr, 1, runtime)
    shard, _ = measure_shard(info, msgs, a.format, repeat, runtime)
    shard *= own_rows(msgs)[0] / frames
    run, setup = loop_step(info, msgs, a.format, runtime)
    loop = best(run, repeat, setup) / frames
    print(f"{frames} frames of {tr.rows / frames:.1f} rows; per frame: egress "
          f"{egress * 1e6:.1f} us, shard {shard * 1e6:.1f} us ({a.format} out), "
          f"total {(egress + shard) * 1e6:.1f} us; the shard's whole loop step (parse, "
          f"decode, acknowledgement, metrics) {loop * 1e6:.1f} us; a frame's path through "
          f"the service (egress + shard loop step) {(egress + loop) * 1e6:.1f} us")
    return 0


def main(a: argparse.Namespace) -> int:
    """`scripts/bench/stages.py`: every stage on each trace (or --small-frames, or --only)."""
    info = load(a.tokenizer)
    runtime = str(workdir("bench-stages-"))
    if a.small_frames:
        return small_frames(a, info, runtime)
    specs: dict[str, TraceSpec] = {"a": (a.requests_a, 1024, 1, 0.05),
                                   "b": (a.requests_b, 256, 4, 0.0)}
    if a.only:
        return run_only(a, info, specs, runtime)
    repeat = a.repeat or 5
    print(f"best of {repeat} runs per figure, thread CPU time; us per row (a row: one rid's "
          "ids of one frame)")
    for name in a.traces.split(","):
        tr = make_trace(info, name, *specs[name])
        print(f"\n## trace {name}: {len(tr.frames)} frames, {tr.rows} rows, {tr.ids} ids "
              f"({tr.ids / tr.rows:.2f} ids/row)")
        print_stages(tr, measure_stages(info, tr, repeat, runtime))
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/bench/stages.py` (its `main` parses them)."""
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--requests-a", type=int, default=2048)
    ap.add_argument("--requests-b", type=int, default=768)
    ap.add_argument("--repeat", type=int, default=0,
                    help="runs per figure; the best is kept (default 5, 7 with --small-frames)")
    ap.add_argument("--traces", default="a,b")
    ap.add_argument("--only", choices=("egress", "shard"),
                    help="run this stage on the first trace for --seconds (for py-spy)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--shards", type=int, default=2, help="with --only")
    ap.add_argument("--small-frames", action="store_true",
                    help="CPU per BATCH frame at --small-concurrency concurrent requests")
    ap.add_argument("--small-requests", type=int, default=400)
    ap.add_argument("--small-concurrency", type=int, default=16)
    ap.add_argument("--format", default="packed",
                    help="the shard's --output-format, with --small-frames")
