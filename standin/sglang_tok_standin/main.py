"""The stand-in scheduler process, started by SGLang's own launcher where its scheduler
would be (`plugin.launch_scheduler`): the same pipe handshake, the same sockets, SGLang's
own message classes; token ids from a stream (`streams.py`) instead of a model.

It connects where SGLang's rank-0 scheduler connects: PULL from
`scheduler_input_ipc_name` (tokenized requests, aborts, control), PUSH to
`detokenizer_ipc_name` (one `BatchTokenIDOutput` per step) and to `tokenizer_ipc_name`
(replies to control requests). Everything SGLang-specific is imported here, in the child,
so the rest of the stand-in runs and is tested without SGLang.

Every SGLang release 0.5.12-0.5.23 is followed by what its modules have, not by its
version number (`Release`): the launcher's arguments by the names of its own
`run_scheduler_process`; the settings from `runtime_context` where it publishes them
(0.5.17 on; with the spawn ranks where `publish` takes them, 0.5.21 on), else from
`server_args`; the ready message with `startup_time` where the release builds one (0.5.17
on) and `hicache_object_layout` where it has one (0.5.23); msgpack IPC with its own
`sock_send`/`sock_recv` where io_struct has them (0.5.15 on), else pickles
(`pickles.py`, SGLang's own IPC there); its own `BatchTokenIDOutput` built by field name
(`release_message.FieldMap`), ids as lists where its scheduler keeps lists (0.5.12), time
stats wrapped where it wraps them. What cannot be followed is refused at start, in one line.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec

from . import pickles
from .config import StandinConfig, for_rank
from .core import Core, EndedRequest
from .grid import StepGrid
from .loads import TITLE, LoadWriter, stop_peers
from .release_message import FieldMap
from .requests import Ask, Sampling
from .streams import Replayed, Synthetic

log = logging.getLogger("sglang_tok.standin")
IDLE_POLL_MS = 1000
STATUS_EVERY_S = 0.2


class StandinRefused(RuntimeError):
    """The running SGLang release asks for something the stand-in cannot follow (one
    line)."""


def run_standin(cfg: StandinConfig, params: tuple[str, ...], *args: Any,
                **kwargs: Any) -> None:
    """SGLang's launcher calls this in the child with the arguments of the release's own
    `run_scheduler_process` (`params`: its parameter names, read by the plugin; 0.5.12-
    0.5.20 pass ten, with the attention-CP and MoE ranks, 0.5.21 on seven)."""
    import setproctitle
    from sglang.srt.utils import kill_itself_when_parent_died

    bound = _bind(params, args, kwargs)
    server_args, port_args = bound["server_args"], bound["port_args"]
    pipe_writer = bound.get("pipe_writer")
    kill_itself_when_parent_died()
    setproctitle.setproctitle(TITLE)
    logging.basicConfig(level=getattr(server_args, "log_level", "info").upper(),
                        format="[%(asctime)s standin] %(message)s")
    started = time.perf_counter()
    try:
        release = Release(server_args, bound)
        standin = Standin(cfg, release, port_args)
        ready = release.ready_info(server_args, time.perf_counter() - started)
    except StandinRefused as exc:  # one line, in the log and to the launcher; no traceback
        log.error("%s", exc)
        if pipe_writer is not None:
            pipe_writer.send({"status": "error", "error": str(exc)})
        raise SystemExit(1) from None
    except Exception as exc:
        log.exception("the stand-in scheduler failed to start")
        if pipe_writer is not None:
            pipe_writer.send({"status": "error", "error": str(exc)})
        raise
    if pipe_writer is not None:
        pipe_writer.send(ready)
    signal.signal(signal.SIGUSR1, lambda *_: standin.stop())
    standin.run()
    standin.close()
    # the loop's end is the process's, as SGLang's scheduler's is: nothing is left to wait
    # for (its sockets closed without linger), and a rank that lingered at interpreter exit
    # was SIGKILLed 15 s into SGLang's shutdown
    logging.shutdown()
    os._exit(0)


def _bind(params: tuple[str, ...], args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """The launcher's arguments by the release's parameter names (without them: SGLang's
    settings and ports first, the pipe last, as every release passes them)."""
    if params:
        if len(args) > len(params):
            raise StandinRefused(
                f"the sglang-tok stand-in cannot follow this SGLang launcher: it passes "
                f"{len(args)} arguments to run_scheduler_process({', '.join(params)})")
        bound = dict(zip(params, args))
    else:
        bound = dict(zip(("server_args", "port_args"), args))
        if len(args) > 2 and hasattr(args[-1], "send"):
            bound["pipe_writer"] = args[-1]
    bound.update(kwargs)
    for name in ("server_args", "port_args"):
        if name not in bound:
            raise StandinRefused(f"the sglang-tok stand-in cannot follow this SGLang "
                                 f"launcher: run_scheduler_process has no {name}")
    return bound


class Host(msgspec.Struct, frozen=True):
    """What the stand-in reads of SGLang's settings (resolved, as the scheduler reads
    them after `publish`)."""

    tokenizer_path: str | None
    skip_tokenizer_init: bool = False
    stream_interval: int = 1
    enable_metrics: bool = False
    max_running_requests: int | None = None
    speculative: bool = False


class Release:
    """What the running SGLang release offers the stand-in, read from its modules once
    (in the child, before the ready message)."""

    def __init__(self, server_args: Any, bound: dict[str, Any]) -> None:
        import sglang
        from sglang.srt.managers import io_struct as io

        self.version = str(getattr(sglang, "__version__", "unknown"))
        self.io = io
        self.core: Core | None = None  # the stand-in's steps, once made (for its loads)
        self.dp_rank = int(bound.get("dp_rank") or 0)
        self.context = self._publish(server_args, bound)
        self.host = self._host(server_args)
        # IPC: msgpack through io_struct's own sock_send/sock_recv (0.5.15 on; they follow
        # SGLANG_USE_PICKLE_IPC themselves), else pickles (0.5.12-0.5.14)
        self.msgpack = hasattr(io, "sock_send") and hasattr(io, "sock_recv")
        self.token_ids = io.BatchTokenIDOutput
        fields, required = class_fields(self.token_ids)
        self.field_map = FieldMap(self.version, fields, required, fills=self._fills(fields),
                         convert=self._convert())
        refusal = self.field_map.refusal()
        if refusal is not None:
            raise StandinRefused(refusal)
        # requests and replies, by the names the release has
        self.classes = {name: getattr(io, name) for name in (
            "TokenizedGenerateReqInput", "BatchTokenizedGenerateReqInput", "AbortReq",
            "FreezeGCReq", "GetInternalStateReq", "GetInternalStateReqOutput",
            "ShutdownReq") if hasattr(io, name)}
        if "TokenizedGenerateReqInput" not in self.classes:
            raise StandinRefused(f"the sglang-tok stand-in cannot be SGLang {self.version}'s "
                                 "scheduler: its io_struct has no TokenizedGenerateReqInput")
        self.wrap = getattr(io, "wrap_as_pickle", None) if self.msgpack else _as_list
        self.span = _weight_span()
        self.beams = _beams_class()

    # ------------------------------------------------------------------ settings
    @staticmethod
    def _publish(server_args: Any, bound: dict[str, Any]) -> Any:
        """SGLang's runtime context, published as its scheduler publishes it; None where
        the release publishes none (0.5.12-0.5.16: settings are `server_args`)."""
        try:
            from sglang.srt import runtime_context as rc
        except ImportError:  # 0.5.12-0.5.13
            return None
        publish = getattr(rc, "publish", None)
        if publish is None or not hasattr(rc, "get_serving"):
            return None
        if "ranks" in inspect.signature(publish).parameters:  # 0.5.21 on
            dp_rank = bound.get("dp_rank")
            if dp_rank is None and "SGLANG_DP_RANK" in os.environ:
                dp_rank = int(os.environ["SGLANG_DP_RANK"])
            publish(server_args, role="scheduler", ranks=rc.SpawnRanks(
                world_rank=rc.spawn_world_rank(server_args, tp_rank=bound.get("tp_rank", 0),
                                               pp_rank=bound.get("pp_rank", 0)),
                dp_rank=dp_rank, gpu_id=bound.get("gpu_id", 0)))
        else:
            publish(server_args, role="scheduler")
        return rc

    def _host(self, server_args: Any) -> Host:
        if self.context is not None:
            serving = self.context.get_serving()
            observe = self.context.get_observability()
        else:
            serving = observe = server_args
        return Host(tokenizer_path=getattr(serving, "tokenizer_path", None),
                    skip_tokenizer_init=bool(getattr(serving, "skip_tokenizer_init", False)),
                    stream_interval=int(getattr(serving, "stream_interval", 1) or 1),
                    enable_metrics=bool(getattr(observe, "enable_metrics", False)),
                    max_running_requests=getattr(server_args, "max_running_requests", None),
                    speculative=getattr(server_args, "speculative_algorithm", None)
                    not in (None, "", "NONE"))

    # ------------------------------------------------------------------ the message
    def _fills(self, fields: tuple[str, ...]) -> dict[str, Callable[[Any], Any]]:
        """Fields the stand-in makes no column for that this release's scheduler fills
        from its own state: `load` (0.5.12-0.5.13), its `GetLoadsReqOutput`."""
        fills: dict[str, Callable[[Any], Any]] = {}
        loads = getattr(self.io, "GetLoadsReqOutput", None)
        if "load" in fields and loads is not None:
            fills["load"] = lambda cols: self.loads(cols)
        return fills

    def loads(self, cols: Any) -> Any:
        """This step's `GetLoadsReqOutput` (what `get_loads(include=["core"])` gives),
        by field name; nil where the release asks for fields not known here."""
        core = self.core
        running = len(core.running) if core is not None else len(cols.get("rids") or ())
        known = {"dp_rank": self.dp_rank, "timestamp": time.time(),
                 "num_running_reqs": running,
                 "num_waiting_reqs": len(core.waiting) if core is not None else 0,
                 "num_waiting_uncached_tokens": 0, "num_used_tokens": 0,
                 "num_total_tokens": 0, "max_total_num_tokens": MAX_TOTAL_TOKENS,
                 "token_usage": 0.0, "gen_throughput": 0.0, "cache_hit_rate": 0.0,
                 "utilization": 0.0,
                 "max_running_requests": core.max_running if core is not None
                 else self.host.max_running_requests}
        try:
            fields, required = class_fields(self.io.GetLoadsReqOutput)
            if not all(name in known for name in required):
                return None
            return self.io.GetLoadsReqOutput(**{k: known[k] for k in fields if k in known})
        except (TypeError, ValueError):
            return None

    def _convert(self) -> dict[str, Callable[[Any], Any]]:
        """Per field, the stand-in's column as this release's scheduler sends it: ids in
        lists where its `Req` keeps lists (0.5.12), else `array`s as the stand-in has
        them."""
        if _keeps_lists(self.io.BatchTokenIDOutput, "decode_ids"):
            return {"decode_ids": _rows_as_lists, "output_ids": _rows_as_lists}
        return {}

    def message(self, cols: dict[str, Any]) -> Any:
        return self.token_ids(**self.field_map.kwargs(cols))

    # ------------------------------------------------------------------ IPC
    def send(self, sock: Any, obj: Any) -> None:
        if self.msgpack:
            self.io.sock_send(sock, obj)
        else:
            pickles.send(sock, obj)

    def recv(self, sock: Any, flags: int) -> Any:
        if self.msgpack:
            return self.io.sock_recv(sock, flags)
        return pickles.recv(sock, flags)

    # ------------------------------------------------------------------ ready
    def ready_info(self, server_args: Any, elapsed: float) -> dict[str, Any]:
        """What this release's `Scheduler.get_init_info` tells the launcher."""
        context = int(getattr(server_args, "context_length", None) or 1 << 20)
        info: dict[str, Any] = {"status": "ready", "max_total_num_tokens": MAX_TOTAL_TOKENS,
                                "max_req_input_len": context - 1}
        try:  # 0.5.17 on (0.5.21 on read it unconditionally)
            from sglang.srt.observability.startup_time import build_scheduler_startup_time
        except ImportError:
            pass
        else:
            info["startup_time"] = _call_by_name(
                build_scheduler_startup_time, self.version,
                {"target_load_weight": 0.0, "draft_load_weight": 0.0,
                 "kv_cache_allocation": 0.0, "scheduler_e2e": elapsed,
                 "target_cuda_graph": None, "draft_cuda_graph": None})
        try:  # 0.5.23
            from sglang.srt.mem_cache.hicache_storage import disabled_l3_layout
        except ImportError:
            pass
        else:
            info["hicache_object_layout"] = _call_by_name(
                disabled_l3_layout, self.version,
                {"reason": "sglang-tok stand-in: no KV cache", "page_size": 1})
        return info


MAX_TOTAL_TOKENS = 1 << 24


def class_fields(cls: type) -> tuple[tuple[str, ...], frozenset[str]]:
    """A message class's fields in order, and those without a default: a msgspec struct's
    (0.5.15 on) or a dataclass's (0.5.12-0.5.14)."""
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        infos = msgspec.structs.fields(cls)
        return (tuple(f.name for f in infos),
                frozenset(f.name for f in infos if f.required))
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return (tuple(f.name for f in fields),
            frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING))


def _keeps_lists(cls: type, name: str) -> bool:
    """Whether the release's class declares a field's rows as lists of ids (0.5.12's
    `List[int]`) rather than `array`s."""
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return False
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == name:
            return "array" not in str(f.type)
    return False


def _rows_as_lists(rows: list[Any]) -> list[list[int]]:
    return [list(r) for r in rows]


def _as_list(items: list[Any]) -> list[Any]:
    """Pickle IPC (0.5.12-0.5.14): the time stats go as the objects themselves."""
    return items


def _call_by_name(fn: Callable[..., Any], version: str, known: dict[str, Any]) -> Any:
    """`fn` with the arguments of `known` it takes; a required one not known here is a
    refusal."""
    params = inspect.signature(fn).parameters
    missing = [n for n, p in params.items() if n not in known
               and p.default is inspect.Parameter.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        raise StandinRefused(f"the sglang-tok stand-in cannot be SGLang {version}'s "
                             f"scheduler: its {fn.__name__} requires {', '.join(missing)}")
    return fn(**{n: v for n, v in known.items() if n in params})


def _weight_span() -> Any:
    try:  # 0.5.19 on
        from sglang.srt.utils.weight_versions import WeightVersionSpan
    except ImportError:
        from sglang_tok.protocols.sglang.wire import WeightVersionSpan
    return WeightVersionSpan


def _beams_class() -> Any:
    try:  # 0.5.19 on
        from sglang.srt.beam_search.types import BeamSearchSequence
        from sglang.srt.managers.io_struct import BeamSearchOutput
    except ImportError:
        return None
    return BeamSearchOutput, BeamSearchSequence


class Standin:
    """The loop: read what the TokenizerManager sends, step on time, send the rows."""

    def __init__(self, cfg: StandinConfig, release: Release, port_args: Any) -> None:
        import zmq

        self.release = release
        self.io = release.io
        self.cfg = cfg
        host = release.host
        skip = host.skip_tokenizer_init
        self.tokenizer = _tokenizer(host.tokenizer_path, skip)
        self.vocab = self.tokenizer.get_vocab_size() if self.tokenizer is not None else 1 << 17
        eos = frozenset([cfg.eos]) if cfg.eos >= 0 else _eos(host.tokenizer_path,
                                                             self.tokenizer)
        self.eos = eos
        decode = (lambda ids: self.tokenizer.decode(list(ids), skip_special_tokens=False)) \
            if self.tokenizer is not None else None
        metrics = host.enable_metrics
        beams = release.beams
        self.core = Core(self._source(), decode, eos, self.vocab,
                         (lambda seqs: _beams(beams, seqs)) if beams is not None else _no_beams,
                         max_running=min(cfg.max_running,
                                         host.max_running_requests or cfg.max_running),
                         stream_interval=host.stream_interval, dp_rank=release.dp_rank,
                         wrap=release.wrap, time_stats=lambda: _time_stats(metrics),
                         span=release.span, speculative=host.speculative)
        release.core = self.core
        ctx = zmq.Context(2)
        self.ctx = ctx
        self.zmq = zmq
        self.recv = ctx.socket(zmq.PULL)
        self.recv.connect(port_args.scheduler_input_ipc_name)
        self.to_detok = ctx.socket(zmq.PUSH)
        self.to_detok.connect(port_args.tokenizer_ipc_name if skip
                              else port_args.detokenizer_ipc_name)
        self.to_tok = ctx.socket(zmq.PUSH)
        self.to_tok.connect(port_args.tokenizer_ipc_name)
        self.ledger_path = for_rank(cfg.ledger, release.dp_rank)
        self.status_path = for_rank(cfg.status, release.dp_rank)
        self.ledger: IO[str] | None = open(self.ledger_path, "a") if cfg.ledger else None
        self.unhandled: set[str] = set()
        self.stopping = False
        self.load_writer = LoadWriter(port_args, release)
        self.next_status = 0.0
        log.info("sglang-tok stand-in scheduler for SGLang %s (%s IPC, %d message fields): "
                 "%s, %s ms steps, %d ids per step", release.version,
                 "msgpack" if release.msgpack else "pickle", len(release.field_map.fields),
                 cfg.trace or f"synthetic streams of ~{cfg.length} ids", cfg.step_ms,
                 cfg.ids_per_step)

    def _source(self) -> Any:
        if self.cfg.trace:
            from .trace_reader import ReplayRefused, read_trace, replay_refusal

            try:
                trace = read_trace(self.cfg.trace)
            except ReplayRefused as exc:
                raise StandinRefused(str(exc)) from None
            refusal = replay_refusal(trace, self.release.field_map)
            if refusal is not None:
                raise StandinRefused(refusal)
            if not trace.requests:
                raise StandinRefused(f"the trace {self.cfg.trace} holds no request")
            log.info("replaying %d requests recorded on SGLang %s (%d messages) as SGLang "
                     "%s's", len(trace.requests), trace.fields.release, trace.messages,
                     self.release.version)
            return Replayed(trace.requests)
        from sglang_tok.kit.workload import BUILTIN_TEXTS

        if self.tokenizer is None:
            corpus = [[(7 * i + 11) % self.vocab for i in range(4096)]]
        else:
            corpus = [self.tokenizer.encode(t, add_special_tokens=False).ids
                      for t in BUILTIN_TEXTS]
        return Synthetic(corpus, min(self.eos) if self.eos else 0, self.cfg.length,
                         self.cfg.spread, self.cfg.ids_per_step, self.cfg.by_prompt)

    def close(self) -> None:
        """Sockets closed without linger (SGLang is shutting down: nobody reads what is
        unsent), the ledger flushed."""
        for sock in (self.recv, self.to_detok, self.to_tok):
            sock.close(linger=0)
        self.ctx.term()
        if self.ledger is not None:
            self.ledger.close()

    def stop(self) -> None:
        """A peer rank was told to shut down (SIGUSR1 from `stop_peers`)."""
        self.stopping = True

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        grid = StepGrid(self.cfg.step_ms / 1000.0)
        while not self.stopping:
            busy = self.core.busy
            wait_ms = int(grid.wait_s(time.monotonic()) * 1000) if busy else IDLE_POLL_MS
            if self.recv.poll(wait_ms):
                self._drain()
            if not self.core.busy:
                if busy:
                    self.load_writer.write(self.core)  # idle now: the DP controller sees it
                grid.idle()
                continue
            now = time.monotonic()
            if grid.due(now):
                self._step()
                grid.stepped(now)
        log.info("stand-in scheduler: shut down after %d steps, %d ids", self.core.steps,
                 self.core.ids)

    def _drain(self) -> None:
        zmq = self.zmq
        while True:
            try:
                obj = self.release.recv(self.recv, zmq.NOBLOCK)
            except zmq.Again:
                return
            self._handle(obj)

    def _step(self) -> None:
        cols = self.core.step()
        self.load_writer.write(self.core)
        if cols is not None:
            self.release.send(self.to_detok, self.release.message(cols))
        if self.core.ended:
            ended, self.core.ended = self.core.ended, []
            if self.ledger is not None:
                self.ledger.write("".join(map(_ledger_line, ended)))
                self.ledger.flush()
        if self.status_path:
            now = time.monotonic()
            if now >= self.next_status:
                self.next_status = now + STATUS_EVERY_S
                self._write_status()

    def _write_status(self) -> None:
        tmp = self.status_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"ids": self.core.ids, "steps": self.core.steps,
                       "running": len(self.core.running), "waiting": len(self.core.waiting)}, f)
        os.replace(tmp, self.status_path)

    # ------------------------------------------------------------------ requests
    def _handle(self, obj: Any) -> None:
        cls = self.release.classes
        name = type(obj).__name__
        if cls.get(name) is not type(obj):  # another module's class of the same name
            name = ""
        send = self.release.send
        if name == "TokenizedGenerateReqInput":
            self.core.add(self._ask(obj))
        elif name == "BatchTokenizedGenerateReqInput":
            for one in obj.batch:
                self.core.add(self._ask(one))
        elif name == "AbortReq":
            for rid in self.core.abort(obj.rid or "", bool(getattr(obj, "abort_all", False)),
                                       getattr(obj, "abort_message", None)):
                send(self.to_tok, cls["AbortReq"](
                    rid=rid, finished_reason=getattr(obj, "finished_reason", None)))
        elif name == "FreezeGCReq":
            send(self.to_detok, obj)
        elif name == "GetInternalStateReq" and "GetInternalStateReqOutput" in cls:
            state = {"stand_in": True, "running": len(self.core.running),
                     "waiting": len(self.core.waiting), "steps": self.core.steps,
                     "last_gen_throughput": 0.0}
            send(self.to_tok, cls["GetInternalStateReqOutput"](
                internal_state=state, http_worker_ipc=getattr(obj, "http_worker_ipc", None)))
        elif name == "ShutdownReq":
            self.stopping = True
            stop_peers()
        elif type(obj).__name__ not in self.unhandled:
            self.unhandled.add(type(obj).__name__)
            log.warning("stand-in scheduler: %s is not served (ignored)", type(obj).__name__)

    def _ask(self, req: Any) -> Ask:
        sp = req.sampling_params
        stops = getattr(sp, "stop_strs", None)
        stops = stops if stops is not None else getattr(sp, "stop", None)
        stops = [stops] if isinstance(stops, str) else list(stops or [])
        encode = self.tokenizer.encode if self.tokenizer is not None else None
        longest = max((len(encode(s, add_special_tokens=False).ids) if encode else len(s)
                       for s in stops), default=0)
        max_new = getattr(sp, "max_new_tokens", None)
        sampling = Sampling(
            max_new_tokens=max_new if max_new is not None else 1 << 30,
            stop_strs=tuple(stops), stop_str_max_len=longest,
            stop_token_ids=frozenset(getattr(sp, "stop_token_ids", None) or ()),
            ignore_eos=bool(getattr(sp, "ignore_eos", False)),
            skip_special_tokens=getattr(sp, "skip_special_tokens", True),
            spaces_between_special_tokens=getattr(sp, "spaces_between_special_tokens", True),
            no_stop_trim=getattr(sp, "no_stop_trim", False),
            stream_interval=getattr(sp, "stream_interval", None),
            # beam search (0.5.19 on)
            beam_width=getattr(sp, "beam_width", None) or 1, n=getattr(sp, "n", None) or 1)
        steer = getattr(sp, "custom_params", None)
        steer = steer if isinstance(steer, dict) else {}
        ids_logprob = getattr(req, "token_ids_logprob", None)
        start = getattr(req, "logprob_start_len", None)
        return Ask(rid=req.rid, input_ids=tuple(req.input_ids or ()), sampling=sampling,
                   ids_per_step=_int(steer.get("sglang_tok_ids_per_step")),
                   length=_int(steer.get("sglang_tok_length")),
                   abort_first=bool(steer.get("sglang_tok_abort_first")),
                   stream=bool(req.stream), http_worker_ipc=getattr(req, "http_worker_ipc", None),
                   return_logprob=bool(getattr(req, "return_logprob", False)),
                   top_logprobs_num=getattr(req, "top_logprobs_num", None) or 0,
                   token_ids_logprob=tuple(ids_logprob) if ids_logprob else None,
                   logprob_start_len=start if start is not None else -1)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _ledger_line(e: EndedRequest) -> str:
    s = e.ask.sampling
    return json.dumps({"rid": e.rid, "ids": e.ids, "finish": e.finish, "beams": e.beams,
                       "skip_special_tokens": s.skip_special_tokens,
                       "spaces_between_special_tokens": s.spaces_between_special_tokens,
                       "no_stop_trim": s.no_stop_trim, "stop": list(s.stop_strs),
                       "stream": e.ask.stream}) + "\n"


def _beams(classes: tuple[Any, Any], seqs: list[tuple[list[int], dict[str, Any], float]]) -> Any:
    output, sequence = classes
    return output(sequences=[
        sequence(tokens=ids, cum_logprob=cum, finish_reason=fin,
                 beam_score=cum / max(1, len(ids)))
        for ids, fin, cum in seqs])


def _no_beams(seqs: list[tuple[list[int], dict[str, Any], float]]) -> Any:
    """A release without beam search (before 0.5.19) sends no beam_width: never called."""
    return None


def _time_stats(metrics: bool) -> Any:
    from sglang.srt.observability.req_time_stats import SchedulerReqTimeStats

    stats = SchedulerReqTimeStats()
    stats.enable_metrics = metrics
    return stats


def _tokenizer(path: str | None, skip: bool) -> Any:
    if skip or not path:
        return None
    from sglang_tok.integrations.sglang.launcher import tokenizer_of
    from sglang_tok.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer_of(path, False))


def _eos(path: str | None, tokenizer: Any) -> frozenset[int]:
    """The model's EOS ids as SGLang finds them: config.json's `eos_token_id`, else the
    tokenizer's `eos_token`."""
    found: set[int] = set()
    if path and os.path.isdir(path):
        for name, key in (("config.json", "eos_token_id"),
                          ("generation_config.json", "eos_token_id")):
            try:
                value = json.loads(Path(path, name).read_text()).get(key)
            except (OSError, ValueError):
                continue
            found.update([value] if isinstance(value, int) else value or [])
        if not found and tokenizer is not None:
            try:
                tok = json.loads(Path(path, "tokenizer_config.json").read_text())
                eos = tok.get("eos_token")
                eos = eos.get("content") if isinstance(eos, dict) else eos
                tid = tokenizer.token_to_id(eos) if eos else None
                if tid is not None:
                    found.add(tid)
            except (OSError, ValueError):
                pass
    return frozenset(found)
