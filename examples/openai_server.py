#!/usr/bin/env python3
"""An OpenAI-compatible server on the integration kit, with a simulated scheduler.

    python examples/openai_server.py --port 8000 [--shards N] [--tokenizer NAME_OR_PATH]

The model is simulated; the detokenizer is not. A completion's text is not an answer to
its prompt: the simulated scheduler replays multilingual text, code and emoji as token
ids (seeded by the request's `seed`), and with a tool-call parser on, the simulated model
"thinks" first and then calls the first tool offered with made-up arguments (`{"query":
the prompt's first 40 characters, "n": 3}`). What is real is everything after the ids:
the service's detokenization, stop strings, logprob texts, reasoning and tool-call
parsing, and the kit's client; `GET /debug/requests/{id}` shows what was generated.

Starts the sglang-tok service (the kit's `sglang_tok.kit.local_service.LocalService`), a
simulated scheduler that pushes one BATCH per step through the kit's writer
(`sim_scheduler.py`), and the kit's asyncio client on the service's output. Serves
`POST /v1/completions` and `POST /v1/chat/completions` (SSE streaming with `data: [DONE]`,
or one JSON response), with `stop`, `max_tokens`, `logprobs`/`top_logprobs` (token texts
from the service),
`stream_options.include_usage` / `continuous_usage_stats`, `n=1`, reasoning and tool
calls parsed in the service (`--reasoning-parser`, `--tool-call-parser`, or the body's
`reasoning_parser` / `tool_parser`: `delta.reasoning_content`, `delta.tool_calls`,
`finish_reason: "tool_calls"` in a chunk of its own). The request's `tools` go to OPEN (the
service rejects calls to other names and types XML values by their schemas), with the
body's `tool_stream` ("incremental", the default, or "whole"); `tool_choice: "none"` turns
tool parsing off for the request. A call's first chunk entry has its `id`, `type` and
`function.name` (arguments ""), later ones `function.arguments` fragments only, so the
accumulation OpenAI's documentation shows gives the non-streamed `message.tool_calls`;
`GET /v1/models`,
`GET /health`, and `GET /debug/requests/{id}` (what the scheduler generated for a
completion id, and its full decode: the reference a load test checks streams against).
A client that disconnects mid-stream gets its rid aborted (ABORT to the service).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import shutil
import sys
import tempfile
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import uvicorn
from sim_scheduler import Generation, Generator, SimScheduler, now, tool_call_text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sglang_tok.finish import Abort, Length
from sglang_tok.kit.client import Client, RequestStream
from sglang_tok.kit.local_service import LocalService
from sglang_tok.parsers import REASONING_PARSERS, TOOL_PARSERS, TOOL_STREAMS, pairing_error
from sglang_tok.process import shards_text
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo, load

_json = msgspec.json.Encoder().encode
DONE = b"data: [DONE]\n\n"
RECORDS = 50000  # completions kept for /debug/requests


class BadRequest(Exception):
    """A request OpenAI would answer 400 `invalid_request_error`: `param` names the body
    field at fault, and it is answered before any stream starts."""

    def __init__(self, message: str, param: str | None = None,
                 code: str | None = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code if param else None

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": str(self), "type": "invalid_request_error",
                                       "param": self.param, "code": self.code}},
                            status_code=400)


def sse(obj: Any) -> bytes:
    return b"data: " + _json(obj) + b"\n\n"


def openai_usage(u: Any) -> dict[str, int]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens}


def finish_reason(d: Delta, saw_tool_calls: bool) -> str:
    fin = d.finish
    if isinstance(fin, Length):
        return "length"
    if isinstance(fin, Abort):
        return "abort"
    # the service marks a request that ended with tool calls (protocol section 8)
    return "tool_calls" if saw_tool_calls or (fin is not None and fin.tool_calls) else "stop"


def chat_delta(d: Delta, rid: str) -> dict[str, Any]:
    """A Delta as an OpenAI chat `delta`: `content`, `reasoning_content` (the service's
    `reasoning`), and `tool_calls` in OpenAI's shape (an id and type on a call's first
    fragment, the one that carries its name)."""
    out: dict[str, Any] = {}
    if d.text:
        out["content"] = d.text
    if d.reasoning:
        out["reasoning_content"] = d.reasoning
    if d.tool_calls:
        calls = []
        for c in d.tool_calls:
            if c.name is None and not c.arguments:
                continue  # a `cut` or `malformed` flag: OpenAI's chunks have no such field
            call: dict[str, Any] = {"index": c.index, "function": {"arguments": c.arguments}}
            if c.name is not None:
                call.update(id=c.id or f"call_{rid}_{c.index}", type="function")
                call["function"]["name"] = c.name
            calls.append(call)
        if calls:
            out["tool_calls"] = calls
    return out


def chat_logprobs(d: Delta) -> dict[str, Any] | None:
    if d.logprobs is None:
        return None
    texts = d.token_texts or [""] * len(d.logprobs)
    tops = d.top_logprobs or [None] * len(d.logprobs)
    top_texts = d.top_texts or [None] * len(d.logprobs)
    content = []
    for (value, _), text, top, ttexts in zip(d.logprobs, texts, tops, top_texts):
        alts = [{"token": t, "logprob": lp, "bytes": list(t.encode())}
                for (_, lp), t in zip(top or [], ttexts or [])]
        content.append({"token": text, "logprob": value, "bytes": list(text.encode()),
                        "top_logprobs": alts})
    return {"content": content}


def completion_logprobs(d: Delta, offset: int) -> dict[str, Any] | None:
    if d.logprobs is None:
        return None
    texts = d.token_texts or [""] * len(d.logprobs)
    tops = d.top_logprobs or [None] * len(d.logprobs)
    top_texts = d.top_texts or [None] * len(d.logprobs)
    offsets = list(itertools.accumulate((len(t) for t in texts[:-1]), initial=offset))
    return {"tokens": texts, "token_logprobs": [v for v, _ in d.logprobs],
            "top_logprobs": [{t: lp for (_, lp), t in zip(top or [], tt or [])}
                             for top, tt in zip(tops, top_texts)],
            "text_offset": offsets}


class Parsed(msgspec.Struct):
    """The fields of a request this server acts on."""

    chat: bool
    prompt: str
    stream: bool
    max_tokens: int | None
    stop: list[str]
    top_k: int  # 0: no logprobs
    include_usage: bool
    continuous_usage: bool
    seed: int | None
    model: str
    reasoning_parser: str = ""  # chat only: --reasoning-parser, or the body's override
    tool_parser: str = ""  # chat only: --tool-call-parser, or the body's override
    tools: list[str] = []  # names of the functions offered (`tools`)
    tool_defs: list[dict[str, Any]] = []  # the request's `tools`, passed to OPEN
    tool_stream: str = "incremental"  # the body's `tool_stream` (protocol section 8)


def _int(body: dict[str, Any], key: str, default: Any, low: int, high: int | None = None
         ) -> Any:
    """body[key] as an int within [low, high], or the default when absent (or null)."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"{key} must be an integer {bounds}, got {value!r}", key)
    return value


def _name(value: Any, param: str, known: Any, flag: str) -> str:
    """A parser or mode name from the body or the server's flag, checked against `known`."""
    name = str(value)
    if name and name not in known:
        raise BadRequest(f"unknown {param} {name!r} (from {flag}); known: "
                         f"{', '.join(sorted(known))}", param)
    return name


def parse(body: Any, chat: bool, model: str, reasoning_parser: str = "",
          tool_parser: str = "") -> Parsed:
    """The request's fields, each checked: a bad one is a BadRequest naming it, answered
    400 before anything is opened (the service would end the stream with an error
    after its 200 and first chunk)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is supported", "n")
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise BadRequest("messages must be a non-empty list of objects", "messages")
        prompt = "\n".join(str(m.get("content") or "") for m in msgs)
        top_k = max(1, _int(body, "top_logprobs", 0, 0, 20)) if body.get("logprobs") else 0
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        max_tokens = _int(body, key, None, 1)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string", "prompt")
        lp = body.get("logprobs")
        if lp is None or lp is False:
            top_k = 0
        else:
            top_k = 1 if lp is True else max(1, _int(body, "logprobs", 0, 0, 5))
        max_tokens = _int(body, "max_tokens", 16, 1)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("stop must be a string or a list of non-empty strings", "stop")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    seed = _int(body, "seed", None, -(1 << 63))
    defs = [t for t in body.get("tools") or [] if isinstance(t, dict)] if chat else []
    tools = [str((t.get("function") or {}).get("name") or "") for t in defs]
    reasoning, tool, tool_stream = _parsers(body, chat, bool(defs), reasoning_parser,
                                            tool_parser)
    return Parsed(chat, prompt, bool(body.get("stream")), max_tokens, stop, top_k,
                  bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats")),
                  seed, str(body.get("model") or model), reasoning, tool,
                  [t for t in tools if t], defs if tool else [], tool_stream)


def _parsers(body: dict[str, Any], chat: bool, has_tools: bool, reasoning_parser: str,
             tool_parser: str) -> tuple[str, str, str]:
    """(reasoning parser, tool parser, tool stream mode): the body's or the server's flags,
    checked as a pair, since a tool offered is a call the model's text must be parsed for."""
    reasoning = tool = ""
    if chat:
        reasoning = _name(body.get("reasoning_parser", reasoning_parser), "reasoning_parser",
                          REASONING_PARSERS, "the body" if "reasoning_parser" in body
                          else "--reasoning-parser")
        tool = _name(body.get("tool_parser", tool_parser), "tool_parser", TOOL_PARSERS,
                     "the body" if "tool_parser" in body else "--tool-call-parser")
    tool_stream = _name(body.get("tool_stream", "incremental"), "tool_stream", TOOL_STREAMS,
                        "the body")
    if body.get("tool_choice") == "none":  # OpenAI: the model must not call a tool
        tool = ""
    elif has_tools and not tool:
        raise BadRequest("tools need a tool-call parser to be parsed from the model's text: "
                         "start the server with --tool-call-parser NAME, or pass tool_parser "
                         f"in the body (known: {', '.join(sorted(TOOL_PARSERS))})", "tools")
    why = pairing_error(reasoning, tool)
    if why:
        raise BadRequest(why, "tool_parser" if tool else "reasoning_parser")
    return reasoning, tool, tool_stream


class _Chunks:
    """The chunks of one streamed response: what a chunk depends on (usage so far, the
    completion's text offset, whether a tool was called) goes on from delta to delta, and
    the route's loop is left with only the writing and its timing."""

    __slots__ = ("rid", "chat", "obj", "created", "model", "usage", "cont", "offset", "tools")

    def __init__(self, p: Parsed, rid: str, prompt_tokens: int) -> None:
        self.rid, self.chat, self.created, self.model = rid, p.chat, now(), p.model
        self.obj = "chat.completion.chunk" if p.chat else "text_completion"
        self.usage: dict[str, int] = {"prompt_tokens": prompt_tokens, "completion_tokens": 0,
                                      "total_tokens": prompt_tokens}
        self.cont = p.continuous_usage and p.include_usage
        self.offset, self.tools = 0, False

    def chunk(self, choice: dict[str, Any]) -> bytes:
        body: dict[str, Any] = {"id": self.rid, "object": self.obj, "created": self.created,
                                "model": self.model, "choices": [choice]}
        if self.cont:
            body["usage"] = self.usage
        return sse(body)

    def usage_chunk(self) -> bytes:
        return sse({"id": self.rid, "object": self.obj, "created": self.created,
                    "model": self.model, "choices": [], "usage": self.usage})

    def add(self, d: Delta, out: list[bytes]) -> bool:
        """Append the chunks of `d` to `out`; True when `d` ends the stream (its error or
        its finish)."""
        if d.usage is not None:
            self.usage = openai_usage(d.usage)
        if d.error:
            out.append(sse({"error": {"message": d.error, "type": "server_error"}}))
            return True
        if self.chat:
            delta = chat_delta(d, self.rid)
            self.tools = self.tools or "tool_calls" in delta
            lp = chat_logprobs(d)
            if delta or lp:
                out.append(self.chunk({"index": 0, "delta": delta, "logprobs": lp,
                                       "finish_reason": None}))
        elif d.text or d.logprobs:
            out.append(self.chunk({"index": 0, "text": d.text,
                                   "logprobs": completion_logprobs(d, self.offset),
                                   "finish_reason": None}))
        self.offset += len(d.text)
        if d.finish is None:
            return False
        fin = finish_reason(d, self.tools)
        out.append(self.chunk({"index": 0, "delta": {}, "logprobs": None,
                               "finish_reason": fin} if self.chat else
                              {"index": 0, "text": "", "logprobs": None, "finish_reason": fin}))
        return True


class App:
    """The service, the simulated scheduler and the client, behind the HTTP routes."""

    def __init__(self, svc: LocalService, info: TokenizerInfo, model: str, step_s: float,
                 idle_timeout: float, reasoning_parser: str = "", tool_parser: str = "") -> None:
        self.svc, self.info, self.model = svc, info, model
        self.reasoning_parser, self.tool_parser = reasoning_parser, tool_parser
        assert svc.sched is not None
        self.writer = svc.sched
        self.gen = Generator(info)
        self.sim = SimScheduler(self.writer, step_s)
        self.idle_timeout = idle_timeout
        self.client: Client | None = None
        self.records: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.ids = itertools.count()
        self.aborted = 0
        # server-side latencies (ms), as the server writes chunks: what a load test sees
        # minus its own client's delays
        self.ttfc_ms: deque[float] = deque(maxlen=100_000)
        self.gap_ms: deque[float] = deque(maxlen=1_000_000)
        self._tasks: list[asyncio.Task[None]] = []

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.client = Client(self.svc.output, self.svc.shards, idle_timeout=self.idle_timeout,
                             on_abandon=self.abort)
        self.client.start()
        self._tasks.append(asyncio.create_task(self.sim.run()))
        try:
            yield
        finally:
            for t in self._tasks:
                t.cancel()
            await self.client.close()
            # here, not after uvicorn.run returns: uvicorn re-raises the SIGTERM it caught
            # once it has shut down, which would skip the caller's cleanup
            await asyncio.to_thread(self.svc.stop)
            shutil.rmtree(self.svc.tmp, ignore_errors=True)

    def abort(self, rid: str) -> None:
        """The consumer went away (or fell behind): the service and the scheduler stop."""
        self.sim.drop(rid)
        self.writer.abort(rid)
        self.aborted += 1
        rec = self.records.get(rid)
        if rec is not None and rec["state"] == "running":
            rec["state"] = "aborted"

    def start(self, p: Parsed) -> tuple[str, Generation, RequestStream]:
        """Register the rid's stream, then OPEN it, then schedule it (in that order)."""
        assert self.client is not None
        rid = f"{'chatcmpl' if p.chat else 'cmpl'}-{next(self.ids)}-{random.getrandbits(32):08x}"
        rs = self.client.stream(rid)
        prompt_tokens = len(self.info.tokenizer.encode(p.prompt, add_special_tokens=False).ids)
        seed = p.seed if p.seed is not None else zlib.crc32(rid.encode())
        # with parsers on, the simulated model thinks first and calls the first tool offered
        call = tool_call_text(p.tool_parser, p.tools[0], {"query": p.prompt[:40], "n": 3}) \
            if p.tool_parser and p.tools else ""  # (tool_choice "none": no parser, no call)
        gen = self.gen.generate(seed, p.max_tokens, prompt_tokens, p.top_k, p.stop,
                                think=bool(p.reasoning_parser), call=call)
        self.records[rid] = {"state": "running", "gen": gen, "finish": None}
        while len(self.records) > RECORDS:
            self.records.popitem(last=False)
        self.writer.open(rid, stop=p.stop, stream=p.stream, continuous_usage=p.continuous_usage,
                         logprob_text=p.top_k > 0, reasoning_parser=p.reasoning_parser,
                         tool_parser=p.tool_parser, tools=p.tool_defs, tool_stream=p.tool_stream)
        self.sim.add(rid, gen)
        return rid, gen, rs

    async def _confirm(self, rid: str, rs: RequestStream) -> None:
        """Read an aborted rid's stream to its end: the service's own last delta (an abort
        finish) is recorded, so /debug/requests shows the ABORT took effect."""
        async for d in rs:
            if d.finish is not None:
                rec = self.records.get(rid)
                if rec is not None:
                    rec["finish"] = d.finish
        self._tasks = [t for t in self._tasks if not t.done()]

    def ended(self, rid: str, d: Delta) -> None:
        self.sim.drop(rid)  # e.g. a stop string: the service ended it before the scheduler
        rec = self.records.get(rid)
        if rec is not None:
            rec["state"] = "error" if d.error else "finished"
            rec["finish"] = d.finish

    # ------------------------------------------------------------------ routes
    async def completions(self, request: Request) -> Response:
        return await self._serve(request, chat=False)

    async def chat(self, request: Request) -> Response:
        return await self._serve(request, chat=True)

    async def _serve(self, request: Request, chat: bool) -> Response:
        try:
            body = msgspec.json.decode(await request.body())
        except msgspec.DecodeError as exc:
            return BadRequest(f"the body is not valid JSON: {exc}").response()
        try:
            p = parse(body, chat, self.model, self.reasoning_parser, self.tool_parser)
        except BadRequest as exc:
            return exc.response()
        rid, gen, rs = self.start(p)
        if p.stream:
            return StreamingResponse(self._sse(p, rid, gen, rs), media_type="text/event-stream")
        return await self._whole(p, rid, gen, rs)

    async def _whole(self, p: Parsed, rid: str, gen: Generation, rs: RequestStream) -> Response:
        try:
            out = await rs.collect()
        except asyncio.CancelledError:
            rs.close()
            self.abort(rid)
            raise
        d = out[-1]
        self.ended(rid, d)
        if d.error:
            return JSONResponse({"error": {"message": d.error, "type": "server_error"}},
                                status_code=500)
        text = "".join(x.text for x in out)
        fin = finish_reason(d, bool(d.tool_calls))
        usage = openai_usage(d.usage) if d.usage else None
        if p.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            message.update({k: v for k, v in chat_delta(d, rid).items() if k != "content"})
            for call in message.get("tool_calls", ()):
                del call["index"]  # a message's calls are a list, not fragments
            choice = {"index": 0, "message": message, "logprobs": chat_logprobs(d),
                      "finish_reason": fin}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": completion_logprobs(d, 0),
                      "finish_reason": fin}
            obj = "text_completion"
        return Response(_json({"id": rid, "object": obj, "created": now(), "model": p.model,
                               "choices": [choice], "usage": usage}),
                        media_type="application/json")

    async def _sse(self, p: Parsed, rid: str, gen: Generation,
                   rs: RequestStream) -> AsyncIterator[bytes]:
        chunks = _Chunks(p, rid, gen.prompt_tokens)
        clock = time.perf_counter
        t_start = last_write = clock()
        first_write = True
        done = False
        try:
            if p.chat:
                yield chunks.chunk({"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None})
            async for first in rs:
                out: list[bytes] = []  # deltas already queued go out in one write
                for d in (first, *rs.ready()):
                    if chunks.add(d, out):
                        done = True
                        self.ended(rid, d)
                        if d.error:
                            break
                if out:
                    t = clock()
                    if first_write:
                        self.ttfc_ms.append(1000 * (t - t_start))
                        first_write = False
                    else:
                        self.gap_ms.append(1000 * (t - last_write))
                    last_write = t
                    yield b"".join(out)
            if p.include_usage:
                yield chunks.usage_chunk()
            yield DONE
        finally:
            if not done:  # the client went away mid-stream
                self.abort(rid)
                self._tasks.append(asyncio.create_task(self._confirm(rid, rs)))

    async def models(self, _request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "sglang-tok"}]})

    async def health(self, _request: Request) -> Response:
        code, body = await asyncio.to_thread(self.svc.health)
        return JSONResponse({"status": "ok" if code == 200 else "unhealthy",
                             "service": body.get("status"), "live": len(self.sim.live),
                             "aborted": self.aborted, "steps": self.sim.steps,
                             "late_steps": self.sim.late_steps},
                            status_code=200 if code == 200 else 503)

    async def debug_stats(self, _request: Request) -> Response:
        """Server-side time to first content chunk and inter-chunk gaps, p50/p99 (ms)."""
        def pct(xs: deque[float], q: float) -> float | None:
            if not xs:
                return None
            ys = sorted(xs)
            return round(ys[min(len(ys) - 1, int(q * len(ys)))], 2)

        return JSONResponse({"streams": len(self.ttfc_ms), "ttfc_ms_p50": pct(self.ttfc_ms, .5),
                             "ttfc_ms_p99": pct(self.ttfc_ms, .99),
                             "inter_chunk_ms_p50": pct(self.gap_ms, .5),
                             "inter_chunk_ms_p99": pct(self.gap_ms, .99),
                             "steps": self.sim.steps, "late_steps": self.sim.late_steps})

    async def debug_request(self, request: Request) -> Response:
        rec = self.records.get(request.path_params["rid"])
        if rec is None:
            return JSONResponse({"error": "unknown id"}, status_code=404)
        gen: Generation = rec["gen"]
        return JSONResponse({"state": rec["state"], "finish": msgspec.to_builtins(rec["finish"]),
                             "ids": gen.ids,
                             "scheduler_finish": gen.finish,
                             "text": gen.expected_text(self.info)})

    def routes(self) -> list[Route]:
        return [Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/models", self.models), Route("/health", self.health),
                Route("/debug/requests/{rid}", self.debug_request),
                Route("/debug/stats", self.debug_stats)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--model", default="sglang-tok-sim")
    ap.add_argument("--step-ms", type=float, default=25.0, help="simulated decode step")
    ap.add_argument("--idle-timeout", type=float, default=60.0)
    ap.add_argument("--output-format", choices=("deltas", "columnar", "packed"),
                    default="packed")
    # SGLang's flags: the default parsers of chat requests (a body may name others:
    # `reasoning_parser` / `tool_parser`, e.g. through the openai package's extra_body)
    ap.add_argument("--reasoning-parser", default="", metavar="NAME",
                    choices=["", *sorted(REASONING_PARSERS)],
                    help=f"one of {', '.join(sorted(REASONING_PARSERS))}")
    ap.add_argument("--tool-call-parser", default="", metavar="NAME",
                    choices=["", *sorted(TOOL_PARSERS)],
                    help=f"one of {', '.join(sorted(TOOL_PARSERS))}")
    a = ap.parse_args()
    info = load(a.tokenizer)
    tmp = Path(tempfile.mkdtemp(prefix="sglang-tok-openai-"))
    svc = LocalService(tmp, shards=a.shards, tokenizer=a.tokenizer, frontend=False,
                  args=["--output-format", a.output_format])
    try:
        svc.start(timeout=180)
        app = App(svc, info, a.model, a.step_ms / 1000, a.idle_timeout, a.reasoning_parser,
                  a.tool_call_parser)
        web = Starlette(routes=app.routes(), lifespan=app.lifespan)
        print(f"serving on http://{a.host}:{a.port} (service: {shards_text(svc.shards)}, "
              f"{a.tokenizer})", flush=True)
        # httptools (the `examples` extra) when installed: h11 costs more per chunk
        uvicorn.run(web, host=a.host, port=a.port, loop="uvloop", http="auto",
                    log_level="warning", backlog=4096, timeout_keep_alive=30)
    finally:
        svc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
