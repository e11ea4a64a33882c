"""SGLang end to end: a whole SGLang 0.5.23 server (its launcher, HTTP server,
TokenizerManager and tokenizer workers) with sglang-tok's stand-in scheduler in place of
the model, its own detokenizer against sglang-tok's plugin, driven by streaming HTTP
clients (`sglang_clients.py`) over `/generate`, `/v1/completions` and
`/v1/chat/completions` (`scripts/sglang/server.py`; `sglang_faults.py` and the SGLang
server tests start servers with `Server` too).

Per configuration (detokenizer system x `--tokenizer-worker-num` x load) it reports what
the clients saw (streamed ids/s, the gap between a stream's chunks p50/p99) and what each
process group spent (CPU microseconds per streamed id: HTTP + TokenizerManager, the
detokenizer's processes, the stand-in, the clients), checks every finished stream's text
against the full decode of the ids the stand-in sent (its ledger), and models the
capacity the measured per-id costs imply on bigger machines (`capacity.py`): a 2-core
run says what 16 and 32 cores would stream and which stage is the wall. With `--dp 2`
(two stand-in schedulers behind SGLang's DataParallelController) and tokenizer workers,
the runs are carried to the field's configurations by `capacity_model.py`: dp 8, 16-32
tokenizer workers, speculative steps, each system's capacity and wall (`field_model`).

Every SGLang process, the clients included, runs in `--sglang-python` (an environment with
SGLang 0.5.23 and sglang-tok installed: `bash ../shared/tools/sglang-venv.sh`, then
`pip install -e . -e ./standin`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from sglang_tok.tokenizer import load_tokenizer
from sglang_tok_bench import capacity_model as cm
from sglang_tok_bench.capacity import Stage, capacity, scaled
from sglang_tok_bench.figures import markdown, write_json
from sglang_tok_bench.gap_hist import percentile
from sglang_tok_testkit.processes import package_env, stop_group
from sglang_tok_testkit.sglang_side import model_dir

# the clients' process, run by the side python with this package first on its path
# (`package_env`)
CLIENTS = ["-m", "sglang_tok_bench.sglang_clients"]
DEFAULT_SGLANG_PYTHON = "/tmp/sglv/bin/python"
STEP_MS = 20
LENGTH = 128  # mean output ids per request
MODEL_CORES = (16, 32)
# the process counts the model scales a measured configuration to (the figure of
# merit: SGLang's detokenizer is the wall where the TokenizerManager is spread over 8)
SCALE_WORKERS = 8


@dataclass(frozen=True)
class System:
    name: str  # "sglang x2": SGLang's detokenizer (router + 2); "sglang-tok x2": 2 shards
    plugin: bool
    workers: int

    @staticmethod
    def parse(text: str) -> System:
        name, _, n = text.strip().rpartition(" x")
        if name not in ("sglang", "sglang-tok") or not n.isdigit():
            raise SystemExit(f"--systems: {text!r} is not 'sglang xN' or 'sglang-tok xN'")
        return System(text.strip(), name == "sglang-tok", int(n))


@dataclass(frozen=True)
class Load:
    clients: int
    ids_per_step: int
    logprobs: float

    @property
    def name(self) -> str:
        lp = f", {self.logprobs:.0%} top-5 logprobs" if self.logprobs else ""
        return f"{self.clients} x {self.ids_per_step} id{'s' if self.ids_per_step > 1 else ''}{lp}"


def rank_files(path: Path, dp: int) -> list[Path]:
    """A stand-in file per DP rank, as `standin.config.for_rank` names them."""
    return [path, *(path.with_name(f"{path.name}.dp{k}") for k in range(1, dp))]


# ---------------------------------------------------------------------------- processes
ROLES = (("sglang::tokenizer_worker", "tm workers"), ("sglang::scheduler", "stand-in"),
         ("sglang::data_parallel_controller", "dp controller"),
         ("sglang::detokenizer_router", "detok router"), ("sglang::detokenizer", "detok"),
         ("sglang-tok: egress", "egress"), ("sglang-tok: shard", "shards"),
         ("sglang-tok: supervisor", "service aux"), ("sglang-tok: http", "service aux"))
GROUPS = {"tm workers": "http+tm", "router": "http+tm", "http+tm": "http+tm",
          "stand-in": "stand-in", "dp controller": "dp controller",
          "detok router": "detokenizer", "detok": "detokenizer",
          "egress": "detokenizer", "shards": "detokenizer", "service aux": "detokenizer",
          "other": "other"}


def role_of(proc: psutil.Process, root: int, workers: int) -> str:
    if proc.pid == root:
        return "router" if workers > 1 else "http+tm"
    try:
        title = proc.name() + " " + " ".join(proc.cmdline()[:1])
    except psutil.Error:
        return "other"
    for prefix, role in ROLES:
        if prefix in title:
            return role
    return "other"


Mark = dict[int, tuple[str, float]]  # pid -> (role, CPU seconds so far)


def cpu_by_pid(root: int, workers: int) -> Mark:
    """Each process's role and CPU seconds so far, over the server's tree."""
    out: Mark = {}
    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = (role_of(p, root, workers), t.user + t.system)
    return out


def between(m0: Mark, m1: Mark) -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds and processes per role from one mark to the next, a process at a time:
    a process read as "other" at one mark (its title not yet set, or unreadable for an
    instant) keeps the role the other mark gave it, instead of carrying its whole CPU
    from one role to another."""
    cpu: dict[str, float] = {}
    count: dict[str, int] = {}
    for pid, (role, sec) in m1.items():
        role0, sec0 = m0.get(pid, (role, 0.0))
        role = role if role != "other" else role0
        cpu[role] = cpu.get(role, 0.0) + sec - sec0
        count[role] = count.get(role, 0) + 1
    return cpu, count


def idle_cpu(server: Server, seconds: float) -> dict[str, float]:
    """Each role's CPU seconds per second with no request in flight: what a process spends
    on its timers and polls whatever the load (SGLang's DataParallelController spins a
    core), taken out of its CPU per id (`run_load`). Read after as long again to settle:
    a tokenizer worker goes on starting up for seconds after the server answers (a fifth
    of a core on a 2-core box), which is no idle cost."""
    if seconds <= 0:
        return {}
    time.sleep(seconds)
    root, workers = server.proc.pid, server.tokenizer_workers
    m0, t0 = cpu_by_pid(root, workers), time.monotonic()
    time.sleep(seconds)
    cpu, _ = between(m0, cpu_by_pid(root, workers))
    return {role: max(0.0, sec) / (time.monotonic() - t0) for role, sec in cpu.items()}


class Server:
    """`python -m sglang.launch_server` with the stand-in scheduler (and the plugin)."""

    def __init__(self, system: System, tokenizer_workers: int, python: str, work: Path,
                 port: int, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 standin: str = "", dp: int = 1) -> None:
        """`args`: more of SGLang's flags; `env`: more variables; `standin`: more of the
        stand-in's settings (SGLANG_TOK_STANDIN, e.g. `trace=PATH`); `dp`: --dp-size, a
        stand-in scheduler per rank behind SGLang's DataParallelController."""
        self.system = system
        self.tokenizer_workers = tokenizer_workers
        self.dp = dp
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ledger = work / f"ledger-{port}.jsonl"
        for old in rank_files(self.ledger, dp):
            old.unlink(missing_ok=True)
        self.log = open(work / f"server-{port}.log", "w")
        self.status = work / f"status-{port}.json"
        settings = (f"step_ms={STEP_MS},length={LENGTH},ledger={self.ledger},"
                    f"status={self.status}")
        env = dict(os.environ, **(env or {}),
                   SGLANG_PLUGINS="sglang_tok,sglang_tok_standin" if system.plugin
                   else "sglang_tok_standin",
                   SGLANG_TOK_STANDIN=f"{settings},{standin}" if standin else settings,
                   TMPDIR=str(work))
        cmd = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir(work)),
               "--device", "cpu", "--port", str(port), "--log-level", "warning",
               "--tokenizer-worker-num", str(tokenizer_workers),
               "--detokenizer-worker-num", str(system.workers), "--skip-server-warmup",
               *(("--dp-size", str(dp)) if dp > 1 else ()), *args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def generated(self) -> int:
        """The ids the stand-ins have sent so far (their status files, one per DP rank)."""
        total = 0
        for path in rank_files(self.status, self.dp):
            try:
                total += int(json.loads(path.read_text())["ids"])
            except (OSError, ValueError, KeyError):
                pass
        return total

    def wait_ready(self, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}); see "
                                   f"{self.log.name}")
            try:
                req = urllib.request.Request(
                    self.url + "/generate", method="POST",
                    data=json.dumps({"text": "ready?",
                                     "sampling_params": {"max_new_tokens": 2}}).encode(),
                    headers={"content-type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as r:
                    if r.status == 200 and self.workers_up(deadline):
                        return
            except OSError:
                time.sleep(1.0)
        raise RuntimeError(f"the server was not ready in {timeout:.0f}s")

    def workers_up(self, deadline: float) -> bool:
        """Every tokenizer worker started (its title set), or the deadline past: the server
        answers once one is up, and a worker still starting is read as "other" and
        spends a core on a 2-core box for a minute."""
        while self.tokenizer_workers > 1 and time.monotonic() < deadline:
            try:
                tree = psutil.Process(self.proc.pid).children(recursive=True)
                up = sum(role_of(p, self.proc.pid, self.tokenizer_workers) == "tm workers"
                         for p in tree)
            except psutil.Error:
                up = 0
            if up >= self.tokenizer_workers:
                return True
            time.sleep(1.0)
        return True

    def stop(self) -> None:
        stop_group(self.proc)
        self.log.close()


# ---------------------------------------------------------------------------- one run
@dataclass
class Run:
    system: str
    tokenizer_workers: int
    load: str
    ids_per_s: float  # streamed to the clients
    generated_per_s: float  # by the stand-in (what the detokenizer decoded)
    itl_p50_ms: float
    itl_p99_ms: float
    us_per_id: dict[str, float]  # per group
    stages: dict[str, tuple[int, float]]  # stage -> (processes, CPU s per id)
    checked: int
    exact: int
    errors: int
    cut_off: int
    model: dict[str, Any] = field(default_factory=dict)
    dp: int = 1
    ids_per_step: int = 1
    logprobs: float = 0.0
    idle: dict[str, float] = field(default_factory=dict)  # role -> cores spent idle


def run_load(server: Server, load: Load, args: argparse.Namespace, work: Path,
             expected: Expected, idle: dict[str, float] | None = None) -> Run:
    """One load for --seconds after --warmup. A stage's CPU is per id it handled: the
    stand-in's and the detokenizer's per id the stand-in generated in the window (its
    status file), HTTP + TokenizerManager's and the clients' per id streamed. They differ
    where the TokenizerManager is the wall: the detokenizer then works ahead of it until
    the queues between them fill (about a thousand messages at each hop)."""
    procs = max(1, min(args.client_procs, load.clients))
    clients = []
    for i in range(procs):
        first, n = i * load.clients // procs, (i + 1) * load.clients // procs
        out = work / f"clients-{server.port}-{load.clients}-{load.ids_per_step}-{i}.json"
        cmd = [args.sglang_python, *CLIENTS, "--url", server.url,
               "--clients", str(n - first), "--first", str(first),
               "--stride", str(load.clients), "--seconds", str(args.seconds),
               "--warmup", str(args.warmup), "--ids-per-step", str(load.ids_per_step),
               "--length", str(LENGTH), "--logprob-share", str(load.logprobs),
               "--drain", str(args.drain), "--out", str(out)]
        clients.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                         env=package_env()), out))
    root, workers = server.proc.pid, server.tokenizer_workers
    marks: list[tuple[Mark, float, int, float]] = []
    lead = clients[0][0]
    assert lead.stdout is not None
    for line in lead.stdout:  # the processes' windows open and close together
        if line.startswith("WINDOW"):
            own = sum(sum(psutil.Process(c.pid).cpu_times()[:2]) for c, _ in clients)
            marks.append((cpu_by_pid(root, workers), own, server.generated(),
                          time.monotonic()))
    codes = [c.wait() for c, _ in clients]
    if any(codes) or len(marks) != 2:
        raise RuntimeError(f"the clients failed ({codes})")
    result = merged([json.loads(out.read_text()) for _, out in clients])
    (c0, k0, g0, t0), (c1, k1, g1, t1) = marks
    streamed = max(result["ids"], 1)
    generated = max(g1 - g0, 1)
    per = {"http+tm": streamed, "detokenizer": generated, "stand-in": generated,
           "dp controller": generated, "other": generated, "clients": streamed}
    role_cpu, count = between(c0, c1)
    for role, rate in (idle or {}).items():  # net of what the role spends idle
        if role in role_cpu:
            role_cpu[role] = max(0.0, role_cpu[role] - rate * (t1 - t0))
    groups: dict[str, float] = {}
    for role, sec in role_cpu.items():
        groups[GROUPS[role]] = groups.get(GROUPS[role], 0.0) + sec
    groups["clients"] = k1 - k0
    stages = {r: (count[r], sec / per[GROUPS[r]]) for r, sec in role_cpu.items()
              if GROUPS[r] in ("http+tm", "detokenizer", "dp controller")}
    checked, exact = expected.check(result["done"])
    return Run(server.system.name, workers, load.name, result["ids_per_s"],
               generated / args.seconds, result["itl_p50_ms"], result["itl_p99_ms"],
               {g: 1e6 * s / per[g] for g, s in groups.items()}, stages, checked, exact,
               result["error_count"], result["cut_off"], dp=server.dp,
               ids_per_step=load.ids_per_step, logprobs=load.logprobs,
               idle={r: round(v, 4) for r, v in (idle or {}).items()})


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several client processes' results as one's: counts add up, gap histograms too."""
    hist = [sum(col) for col in zip(*(p["gap_hist"] for p in parts))]
    return {"ids": sum(p["ids"] for p in parts),
            "ids_per_s": sum(p["ids_per_s"] for p in parts),
            "itl_p50_ms": percentile(hist, 0.50), "itl_p99_ms": percentile(hist, 0.99),
            "error_count": sum(p["error_count"] for p in parts),
            "cut_off": sum(p["cut_off"] for p in parts),
            "done": [d for p in parts for d in p["done"]]}


# ---------------------------------------------------------------------------- exactness
class Expected:
    """Every streamed text against the full decode of what the stand-in sent."""

    def __init__(self, ledger: Path, dp: int = 1) -> None:
        self.ledgers = rank_files(ledger, dp)
        self.tok = load_tokenizer("deepseek-v4")
        self.seen: dict[str, dict[str, Any]] = {}

    def _read(self) -> None:
        for ledger in self.ledgers:
            if ledger.exists():
                for line in ledger.read_text().splitlines():
                    e = json.loads(line)
                    self.seen[e["rid"]] = e

    def text(self, e: dict[str, Any]) -> str:
        ids, fin = list(e["ids"]), e["finish"] or {}
        matched = fin.get("matched")
        if fin.get("type") == "stop" and isinstance(matched, int) and ids \
                and ids[-1] == matched and not e["no_stop_trim"]:
            ids = ids[:-1]
        text = self.tok.decode(ids, skip_special_tokens=e["skip_special_tokens"])
        if fin.get("type") == "stop" and isinstance(matched, str):
            at = text.find(matched)
            if at >= 0:
                text = text[:at + len(matched)] if e["no_stop_trim"] else text[:at]
        return text

    def check(self, done: list[dict[str, Any]]) -> tuple[int, int]:
        self._read()
        checked = exact = 0
        for d in done:
            e = self.seen.get(d["rid"])
            if e is None:
                continue
            checked += 1
            exact += d["text"] == self.text(e)
        return checked, exact


# ---------------------------------------------------------------------------- model
def model(run: Run, sys_workers: int) -> dict[str, Any]:
    stages = {n: Stage(p, c) for n, (p, c) in run.stages.items() if n not in cm.SPINNING}
    keep = cm.reserved(run.dp)
    out: dict[str, Any] = {}
    for cores in MODEL_CORES:
        cap, wall = capacity(stages, cores, keep)
        out[f"{cores} cores"] = (cap, wall)
    # the same costs with SCALE_WORKERS tokenizer workers and (for a system of several
    # detokenizer processes) as many detokenizer workers or shards
    counts = {"tm workers": SCALE_WORKERS}
    if sys_workers > 1:
        counts.update({"detok": SCALE_WORKERS, "shards": SCALE_WORKERS})
    if "tm workers" in stages:
        big = scaled(stages, counts)
        for cores in MODEL_CORES:
            out[f"{cores} cores, {SCALE_WORKERS} workers"] = capacity(big, cores, keep)
    return out


def field_model(runs: list[Run], targets: list[cm.Target]) -> list[cm.Row]:
    """`capacity_model.compare` from the runs at the most DP ranks and tokenizer workers
    measured (2 or more of each), per ids per row, without logprobs: stock x1, stock's
    router + N workers, and the plugin with the most shards measured."""
    usable = [r for r in runs if r.tokenizer_workers > 1 and r.dp > 1 and not r.logprobs]
    if not usable:
        return []
    dp, tw = max((r.dp, r.tokenizer_workers) for r in usable)
    rows: list[cm.Row] = []
    for k in sorted({r.ids_per_step for r in usable}):
        best: dict[str, tuple[int, dict[str, Stage]]] = {}
        for r in usable:
            if (r.dp, r.tokenizer_workers, r.ids_per_step) != (dp, tw, k):
                continue
            sys = System.parse(r.system)
            name = cm.PLUGIN if sys.plugin else cm.STOCK_ROUTER if sys.workers > 1 \
                else cm.STOCK_X1
            if name not in best or sys.workers > best[name][0]:
                best[name] = (sys.workers, {n: Stage(p, c) for n, (p, c) in r.stages.items()})
        rows += cm.compare({name: stages for name, (_, stages) in best.items()}, targets, k)
    return rows


def table(runs: list[Run]) -> str:
    head = ["system", "dp", "TM workers", "load", "ids/s streamed", "ids/s decoded",
            "chunk gap p50/p99 ms",
            "µs/id HTTP+TM", "µs/id detok", "µs/id stand-in", "µs/id clients", "exact",
            *[f"cap {c} cores (wall)" for c in MODEL_CORES],
            *[f"cap {c}c, {SCALE_WORKERS} TM workers" for c in MODEL_CORES]]
    rows = []
    for r in runs:
        def cap(key: str, r: Run = r) -> str:
            got = r.model.get(key)
            return f"{got[0]:,.0f} ({got[1]})" if got else "-"
        rows.append([r.system, r.dp, r.tokenizer_workers, r.load, f"{r.ids_per_s:,.0f}",
                     f"{r.generated_per_s:,.0f}",
                     f"{r.itl_p50_ms:.0f} / {r.itl_p99_ms:.0f}",
                     f"{r.us_per_id.get('http+tm', 0):.1f}",
                     f"{r.us_per_id.get('detokenizer', 0):.1f}",
                     f"{r.us_per_id.get('stand-in', 0):.1f}",
                     f"{r.us_per_id.get('clients', 0):.1f}", f"{r.exact}/{r.checked}",
                     *[cap(f"{c} cores") for c in MODEL_CORES],
                     *[cap(f"{c} cores, {SCALE_WORKERS} workers") for c in MODEL_CORES]])
    return markdown(head, rows)


def parse_loads(text: str, logprobs: list[float]) -> list[Load]:
    out = []
    for part in text.split(","):
        n, _, k = part.strip().partition("x")
        out += [Load(int(n), int(k or 1), lp) for lp in logprobs]
    return out


def targets(args: argparse.Namespace) -> list[cm.Target]:
    """The model's targets: --model-dp x --model-tm-workers x --model-detok-workers x
    --model-cores."""
    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",")]
    return [cm.Target(dp, tw, n, c) for dp in ints(args.model_dp)
            for tw in ints(args.model_tm_workers) for n in ints(args.model_detok_workers)
            for c in ints(args.model_cores)]


def print_model(runs: list[Run], args: argparse.Namespace) -> None:
    rows = field_model(runs, targets(args))
    if not rows:
        print("\nno field model: measure stock and the plugin with --dp 2 and 2 or more "
              "tokenizer workers")
        return
    print()
    print(cm.table(rows))
    short = cm.goal_met(rows)
    if not any(r.system == cm.PLUGIN for r in rows):
        return
    print("\nthe goal (plugin never the wall, >= 3x stock x1, >= 1.5x stock router+N): "
          + ("met on every row" if not short else f"short on {len(short)}:"))
    for line in short:
        print("  " + line)


def load_runs(path: Path) -> list[Run]:
    """A --json's runs, their per-run model as this checkout draws it."""
    runs = [Run(**{**r, "stages": {n: tuple(v) for n, v in r["stages"].items()}})
            for r in json.loads(path.read_text())["runs"]]
    for r in runs:
        r.model = model(r, System.parse(r.system).workers)
    return runs


def main(args: argparse.Namespace) -> int:
    """`scripts/sglang/server.py`: per DP size, tokenizer worker count and system, one
    server and every load on it; the table (and the JSON after each run), then the field
    model (`capacity_model`)."""
    if args.model_from:
        saved = load_runs(Path(args.model_from))
        print(table(saved))
        print_model(saved, args)
        return 0
    if args.quick:
        args.systems, args.tokenizer_workers, args.loads = "sglang x1,sglang-tok x1", "1", \
            "256x1"
        args.logprobs, args.seconds, args.warmup = "0", 8.0, 4.0
    systems = [System.parse(s) for s in args.systems.split(",")]
    loads = parse_loads(args.loads, [float(x) for x in args.logprobs.split(",")])
    work = Path(tempfile.mkdtemp(prefix="bench-sglang-server-"))
    runs: list[Run] = []
    port = args.port
    t0 = time.monotonic()
    configs = [(dp, int(tw)) for dp in (int(x) for x in args.dp.split(","))
               for tw in args.tokenizer_workers.split(",")]
    for dp, tw in configs:
        for system in systems:
            if args.deadline and time.monotonic() - t0 > args.deadline:
                print(f"skipped ({args.deadline:.0f}s --deadline): {system.name}, dp {dp}, "
                      f"{tw} TM workers", flush=True)
                continue
            port += 1
            server = Server(system, tw, args.sglang_python, work, port, dp=dp)
            try:
                server.wait_ready(args.ready_timeout)
                expected = Expected(server.ledger, server.dp)
                idle = idle_cpu(server, args.idle)
                if idle:
                    print(f"idle CPU (cores): {', '.join(f'{r} {v:.3f}' for r, v in idle.items())}",
                          flush=True)
                for load in loads:
                    if args.per_worker:
                        load = Load(load.clients * tw, load.ids_per_step, load.logprobs)
                    run = run_load(server, load, args, work, expected, idle)
                    run.model = model(run, system.workers)
                    runs.append(run)
                    print(table([run]).splitlines()[-1], flush=True)
                    if args.json:  # after each run: a run cut short keeps what it measured
                        write_json(args.json, {"runs": [r.__dict__ for r in runs],
                                               "step_ms": STEP_MS, "length": LENGTH,
                                               "cpus": os.cpu_count()})
            finally:
                server.stop()
    print()
    print(table(runs))
    print_model(runs, args)
    return 0


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/sglang/server.py` (its `main` parses them)."""
    ap.add_argument("--sglang-python", default=os.environ.get(
        "SGLANG_PYTHON", DEFAULT_SGLANG_PYTHON))
    ap.add_argument("--systems", default="sglang x1,sglang x2,sglang-tok x1,sglang-tok x2")
    ap.add_argument("--tokenizer-workers", default="1,2,4")
    ap.add_argument("--loads", default="256x1,1024x1,64x4,256x4",
                    help="CLIENTSxIDS_PER_STEP, comma-separated")
    ap.add_argument("--logprobs", default="0,0.05", help="shares of requests with top-5")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=6.0)
    ap.add_argument("--quick", action="store_true",
                    help="sglang x1 against sglang-tok x1, 1 TM worker, 256x1, 8 s")
    ap.add_argument("--deadline", type=float, default=0.0,
                    help="start no configuration after this many seconds (a lent machine's "
                         "time is counted)")
    ap.add_argument("--per-worker", action="store_true",
                    help="a load's clients per tokenizer worker (256x1 with 4 workers: 1024)")
    ap.add_argument("--drain", type=float, default=30.0,
                    help="seconds streams may run on after the window (then cut off)")
    ap.add_argument("--client-procs", type=int, default=1,
                    help="client processes (one streams at most ~30k ids/s)")
    ap.add_argument("--dp", default="1", help="--dp-size values (a stand-in per rank)")
    ap.add_argument("--model-dp", default="8", help="the field model's dp sizes")
    ap.add_argument("--model-tm-workers", default="16,32",
                    help="the field model's tokenizer worker counts")
    ap.add_argument("--model-detok-workers", default="8",
                    help="the field model's N: stock's detokenizer workers, the plugin's shards")
    ap.add_argument("--model-cores", default="16,32,64", help="the field model's cores")
    ap.add_argument("--model-from", default="",
                    help="a --json of an earlier run: its tables and the field model, no run")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to read each process's idle CPU before the loads, then "
                         "taken out of its CPU per id (0: not taken out)")
    ap.add_argument("--ready-timeout", type=float, default=480.0,
                    help="seconds a server may take to start (minutes on a busy 2-core box)")
    ap.add_argument("--port", type=int, default=31000)
    ap.add_argument("--json", default="")
