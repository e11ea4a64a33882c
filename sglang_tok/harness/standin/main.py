"""The stand-in scheduler process, started by SGLang's own launcher where its scheduler
would be (`plugin.launch_scheduler`): the same pipe handshake, the same sockets, SGLang's
own message classes; token ids from a stream (`streams.py`) instead of a model.

It connects where SGLang's rank-0 scheduler connects: PULL from
`scheduler_input_ipc_name` (tokenized requests, aborts, control), PUSH to
`detokenizer_ipc_name` (one `BatchTokenIDOutput` per step) and to `tokenizer_ipc_name`
(replies to control requests). Everything SGLang-specific is imported here, in the child,
so the rest of the stand-in runs and is tested without SGLang.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import IO, Any

import msgspec

from .config import StandinConfig
from .core import Core, Ended
from .requests import Ask, Sampling
from .streams import Replayed, Synthetic

log = logging.getLogger("sglang_tok.standin")
IDLE_POLL_MS = 1000
STATUS_EVERY_S = 0.2


def run_standin(cfg: StandinConfig, server_args: Any, port_args: Any, gpu_id: int = 0,
                tp_rank: int = 0, pp_rank: int = 0, dp_rank: int | None = None,
                pipe_writer: Any = None, *_: Any, **__: Any) -> None:
    """`run_scheduler_process`'s signature: SGLang's launcher calls this in the child."""
    import setproctitle
    from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank
    from sglang.srt.utils import kill_itself_when_parent_died

    kill_itself_when_parent_died()
    setproctitle.setproctitle("sglang::scheduler (sglang-tok stand-in)")
    logging.basicConfig(level=getattr(server_args, "log_level", "info").upper(),
                        format="[%(asctime)s standin] %(message)s")
    started = time.perf_counter()
    try:
        # the resolved settings (tokenizer_path, stream_interval...), as the scheduler
        # reads them
        publish(server_args, role="scheduler", ranks=SpawnRanks(
            world_rank=spawn_world_rank(server_args, tp_rank=tp_rank, pp_rank=pp_rank),
            dp_rank=dp_rank, gpu_id=gpu_id))
        standin = Standin(cfg, _host(server_args), port_args, dp_rank or 0)
    except Exception as exc:
        log.exception("the stand-in scheduler failed to start")
        if pipe_writer is not None:
            pipe_writer.send({"status": "error", "error": str(exc)})
        raise
    if pipe_writer is not None:
        pipe_writer.send(ready_info(server_args, time.perf_counter() - started))
    standin.run()


class Host(msgspec.Struct, frozen=True):
    """What the stand-in reads of SGLang's settings (resolved, as the scheduler reads
    them after `publish`)."""

    tokenizer_path: str | None
    skip_tokenizer_init: bool = False
    stream_interval: int = 1
    enable_metrics: bool = False
    max_running_requests: int | None = None


def _host(server_args: Any) -> Host:
    from sglang.srt.runtime_context import get_observability, get_serving

    serving = get_serving()
    return Host(tokenizer_path=serving.tokenizer_path,
                skip_tokenizer_init=bool(serving.skip_tokenizer_init),
                stream_interval=int(serving.stream_interval or 1),
                enable_metrics=bool(get_observability().enable_metrics),
                max_running_requests=server_args.max_running_requests)


def ready_info(server_args: Any, elapsed: float) -> dict[str, Any]:
    """What SGLang's `Scheduler.get_init_info` tells the launcher."""
    from sglang.srt.mem_cache.hicache_storage import disabled_l3_layout
    from sglang.srt.observability.startup_time import build_scheduler_startup_time

    context = int(getattr(server_args, "context_length", None) or 1 << 20)
    return {"status": "ready", "max_total_num_tokens": 1 << 24,
            "max_req_input_len": context - 1,
            "startup_time": build_scheduler_startup_time(
                target_load_weight=0.0, draft_load_weight=0.0, kv_cache_allocation=0.0,
                scheduler_e2e=elapsed, target_cuda_graph=None, draft_cuda_graph=None),
            "hicache_object_layout": disabled_l3_layout("sglang-tok stand-in: no KV cache",
                                                        page_size=1)}


class Standin:
    """The loop: read what the TokenizerManager sends, step on time, send the rows."""

    def __init__(self, cfg: StandinConfig, host: Host, port_args: Any, dp_rank: int) -> None:
        import zmq
        from sglang.srt.managers import io_struct as io
        from sglang.srt.utils.weight_versions import WeightVersionSpan

        self.io = io
        self.cfg = cfg
        skip = host.skip_tokenizer_init
        self.tokenizer = _tokenizer(host.tokenizer_path, skip)
        self.vocab = self.tokenizer.get_vocab_size() if self.tokenizer is not None else 1 << 17
        eos = frozenset([cfg.eos]) if cfg.eos >= 0 else _eos(host.tokenizer_path,
                                                             self.tokenizer)
        self.eos = eos
        decode = (lambda ids: self.tokenizer.decode(list(ids), skip_special_tokens=False)) \
            if self.tokenizer is not None else None
        metrics = host.enable_metrics
        self.core = Core(self._source(), decode, eos, self.vocab, _beams,
                         max_running=min(cfg.max_running,
                                         host.max_running_requests or cfg.max_running),
                         stream_interval=host.stream_interval, dp_rank=dp_rank,
                         wrap=io.wrap_as_pickle, time_stats=lambda: _time_stats(metrics),
                         span=WeightVersionSpan)
        ctx = zmq.Context(2)
        self.zmq = zmq
        self.recv = ctx.socket(zmq.PULL)
        self.recv.connect(port_args.scheduler_input_ipc_name)
        self.to_detok = ctx.socket(zmq.PUSH)
        self.to_detok.connect(port_args.tokenizer_ipc_name if skip
                              else port_args.detokenizer_ipc_name)
        self.to_tok = ctx.socket(zmq.PUSH)
        self.to_tok.connect(port_args.tokenizer_ipc_name)
        self.ledger: IO[str] | None = open(cfg.ledger, "a") if cfg.ledger else None
        self.unhandled: set[str] = set()
        self.stopping = False
        self.next_status = 0.0
        log.info("sglang-tok stand-in scheduler: %s, %s ms steps, %d ids per step",
                 cfg.trace or f"synthetic streams of ~{cfg.length} ids", cfg.step_ms,
                 cfg.ids_per_step)

    def _source(self) -> Any:
        if self.cfg.trace:
            from .record import recordings

            return Replayed(recordings(self.cfg.trace))
        from sglang_tok.harness.workload import BUILTIN_TEXTS

        if self.tokenizer is None:
            corpus = [[(7 * i + 11) % self.vocab for i in range(4096)]]
        else:
            corpus = [self.tokenizer.encode(t, add_special_tokens=False).ids
                      for t in BUILTIN_TEXTS]
        return Synthetic(corpus, min(self.eos) if self.eos else 0, self.cfg.length,
                         self.cfg.spread, self.cfg.ids_per_step)

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        step_s = self.cfg.step_ms / 1000.0
        next_step = time.monotonic()
        while not self.stopping:
            now = time.monotonic()
            if self.core.busy:
                wait_ms = max(0, int((next_step - now) * 1000))
            else:
                wait_ms = IDLE_POLL_MS
            if self.recv.poll(wait_ms):
                self._drain()
            now = time.monotonic()
            if not self.core.busy:
                next_step = now
                continue
            if now >= next_step:
                self._step()
                next_step = max(next_step + step_s, now) if step_s else now
        log.info("stand-in scheduler: shut down after %d steps, %d ids", self.core.steps,
                 self.core.ids)

    def _drain(self) -> None:
        zmq = self.zmq
        while True:
            try:
                obj = self.io.sock_recv(self.recv, zmq.NOBLOCK)
            except zmq.Again:
                return
            self._handle(obj)

    def _step(self) -> None:
        cols = self.core.step()
        if cols is not None:
            self.io.sock_send(self.to_detok, self.io.BatchTokenIDOutput(**cols))
        if self.core.ended:
            ended, self.core.ended = self.core.ended, []
            if self.ledger is not None:
                self.ledger.write("".join(map(_ledger_line, ended)))
                self.ledger.flush()
        if self.cfg.status:
            now = time.monotonic()
            if now >= self.next_status:
                self.next_status = now + STATUS_EVERY_S
                self._write_status()

    def _write_status(self) -> None:
        tmp = self.cfg.status + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"ids": self.core.ids, "steps": self.core.steps,
                       "running": len(self.core.running), "waiting": len(self.core.waiting)}, f)
        os.replace(tmp, self.cfg.status)

    # ------------------------------------------------------------------ requests
    def _handle(self, obj: Any) -> None:
        io = self.io
        if isinstance(obj, io.TokenizedGenerateReqInput):
            self.core.add(self._ask(obj))
        elif isinstance(obj, io.BatchTokenizedGenerateReqInput):
            for one in obj.batch:
                self.core.add(self._ask(one))
        elif isinstance(obj, io.AbortReq):
            for rid in self.core.abort(obj.rid or "", obj.abort_all, obj.abort_message):
                io.sock_send(self.to_tok, io.AbortReq(rid=rid,
                                                      finished_reason=obj.finished_reason))
        elif isinstance(obj, io.FreezeGCReq):
            io.sock_send(self.to_detok, obj)
        elif isinstance(obj, io.GetInternalStateReq):
            state = {"stand_in": True, "running": len(self.core.running),
                     "waiting": len(self.core.waiting), "steps": self.core.steps,
                     "last_gen_throughput": 0.0}
            io.sock_send(self.to_tok, io.GetInternalStateReqOutput(
                internal_state=state, http_worker_ipc=obj.http_worker_ipc))
        elif isinstance(obj, io.ShutdownReq):
            self.stopping = True
        elif type(obj).__name__ not in self.unhandled:
            self.unhandled.add(type(obj).__name__)
            log.warning("stand-in scheduler: %s is not served (ignored)", type(obj).__name__)

    def _ask(self, req: Any) -> Ask:
        sp = req.sampling_params
        stops = sp.stop_strs if sp.stop_strs is not None else sp.stop
        stops = [stops] if isinstance(stops, str) else list(stops or [])
        encode = self.tokenizer.encode if self.tokenizer is not None else None
        longest = max((len(encode(s, add_special_tokens=False).ids) if encode else len(s)
                       for s in stops), default=0)
        sampling = Sampling(
            max_new_tokens=sp.max_new_tokens if sp.max_new_tokens is not None else 1 << 30,
            stop_strs=tuple(stops), stop_str_max_len=longest,
            stop_token_ids=frozenset(sp.stop_token_ids or ()), ignore_eos=bool(sp.ignore_eos),
            skip_special_tokens=sp.skip_special_tokens,
            spaces_between_special_tokens=sp.spaces_between_special_tokens,
            no_stop_trim=sp.no_stop_trim, stream_interval=sp.stream_interval,
            beam_width=sp.beam_width or 1, n=sp.n or 1)
        steer = sp.custom_params if isinstance(sp.custom_params, dict) else {}
        return Ask(rid=req.rid, input_ids=tuple(req.input_ids or ()), sampling=sampling,
                   ids_per_step=_int(steer.get("sglang_tok_ids_per_step")),
                   length=_int(steer.get("sglang_tok_length")),
                   stream=bool(req.stream), http_worker_ipc=req.http_worker_ipc,
                   return_logprob=bool(req.return_logprob),
                   top_logprobs_num=req.top_logprobs_num or 0,
                   token_ids_logprob=tuple(req.token_ids_logprob)
                   if req.token_ids_logprob else None,
                   logprob_start_len=req.logprob_start_len
                   if req.logprob_start_len is not None else -1)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _ledger_line(e: Ended) -> str:
    s = e.ask.sampling
    return json.dumps({"rid": e.rid, "ids": e.ids, "finish": e.finish, "beams": e.beams,
                       "skip_special_tokens": s.skip_special_tokens,
                       "spaces_between_special_tokens": s.spaces_between_special_tokens,
                       "no_stop_trim": s.no_stop_trim, "stop": list(s.stop_strs),
                       "stream": e.ask.stream}) + "\n"


def _beams(seqs: list[tuple[list[int], dict[str, Any], float]]) -> Any:
    from sglang.srt.beam_search.types import BeamSearchSequence
    from sglang.srt.managers.io_struct import BeamSearchOutput

    return BeamSearchOutput(sequences=[
        BeamSearchSequence(tokens=ids, cum_logprob=cum, finish_reason=fin,
                           beam_score=cum / max(1, len(ids)))
        for ids, fin, cum in seqs])


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
