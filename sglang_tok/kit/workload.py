"""Synthetic scheduler traffic and the outputs it must produce: for tests, demo and replay.

A `Plan` is a set of requests (their ids, options, how they end) scheduled into BATCH
frames the way a scheduler emits them: a target concurrency, requests arriving as others
finish, one frame per step, 1..k ids per row. `expected` is the protocol's reference
output of one request, computed with full `decode` calls (rules 2 and 3).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sglang_tok.finish import Abort, Finish, Length, Stop, stop_token
from sglang_tok.protocols.model import batch as native_batch
from sglang_tok.protocols.model import control, errors, tags

from ..tokenizer import TokenizerInfo

BUILTIN_TEXTS = [
    "The detokenizer turns token ids into text, one step at a time, for every request.",
    "大型语言模型在每一步为成百上千个并发请求生成标记。解码必须精确无误。",
    "言語モデルのデコーダは、各ステップでトークンをテキストに変換します。",
    "Модель генерирует токены, а детокенизатор превращает их в текст без ошибок.",
    "يقوم المفكك بتحويل الرموز إلى نص لكل طلب على حدة دون خلط الطلبات.",
    "डिटोकनाइज़र हर अनुरोध के लिए टोकन को पाठ में बदलता है।",
    "def detokenize(ids: list[int]) -> str:\n    return tokenizer.decode(ids)\n",
    "## Results\n\n| shards | tokens/s |\n|---|---|\n| 1 | 1.0x |\n| 2 | 1.9x |\n",
    "Emoji too: 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🙂 ❤️‍🔥 and ภาษาไทย ไม่มีช่องว่าง",
    "   Whitespace\t\truns,\n\n\nnewlines and trailing spaces   ",
]


@dataclass
class PlannedRequest:
    rid: str
    ids: list[int]
    chunks: list[list[int]]
    finish: Finish | None  # None: ended by ABORT or ERROR instead
    opts: control.Open | None = None
    end_by: str = ""  # "", "abort" or "error"
    prompt_tokens: int = 0
    cached_tokens: int = 0
    logprobs: bool = False
    engine: int = 0


@dataclass
class PlanSpec:
    requests: int = 200
    concurrency: int = 64
    ids_per_row: tuple[int, int] = (1, 1)
    min_tokens: int = 8
    max_tokens: int = 96
    logprob_share: float = 0.0
    top_k: int = 5
    stop_share: float = 0.0  # service-detected OPEN stop strings
    options_share: float = 0.0  # OPEN with other options (skip specials off, usage, ...)
    special_share: float = 0.0  # special ids mixed into the output
    abort_share: float = 0.0
    error_share: float = 0.0
    prompt_share: float = 0.0
    engines: int = 1
    seed: int = 0


def make_requests(info: TokenizerInfo, spec: PlanSpec, texts: list[str] | None = None,
                  prefix: str = "req") -> list[PlannedRequest]:
    rng = random.Random(spec.seed)
    texts = texts or BUILTIN_TEXTS
    corpus = [info.tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    specials = sorted(info.special_ids)
    out = []
    for n in range(spec.requests):
        want = rng.randint(spec.min_tokens, spec.max_tokens)
        ids: list[int] = []
        while len(ids) < want:
            ids.extend(rng.choice(corpus))
        ids = ids[rng.randrange(0, 4):][:want]
        if specials and rng.random() < spec.special_share:
            for _ in range(rng.randint(1, 3)):
                ids.insert(rng.randrange(0, len(ids) + 1), rng.choice(specials))
        chunks, i = [], 0
        lo, hi = spec.ids_per_row
        while i < len(ids):
            k = rng.randint(lo, hi)
            chunks.append(ids[i:i + k])
            i += k
        req = PlannedRequest(f"{prefix}-{spec.seed}-{n}", ids, chunks,
                             Length(len(ids)),
                             prompt_tokens=rng.randint(1, 2000), engine=n % spec.engines)
        req.cached_tokens = rng.randint(0, req.prompt_tokens)
        req.logprobs = rng.random() < spec.logprob_share
        opts: dict[str, Any] = {}
        if rng.random() < spec.prompt_share:
            opts["prompt_ids"] = rng.choice(corpus)[: rng.randint(1, 12)]
        if rng.random() < spec.stop_share:
            text = info.tokenizer.decode(ids)
            at = rng.randrange(0, max(1, len(text)))
            opts["stop"] = [text[at:at + rng.randint(1, 4)] or "zz", "never-seen-stop"]
            opts["include_stop_str_in_output"] = rng.random() < 0.5
        if rng.random() < spec.options_share:
            opts.update(skip_special_tokens=rng.random() < 0.5,
                        continuous_usage=rng.random() < 0.5, stream=rng.random() < 0.8,
                        logprob_text=req.logprobs, attribution=rng.random() < 0.5,
                        no_stop_trim=rng.random() < 0.3)
        if opts:
            req.opts = control.Open(req.rid, **opts)
        roll = rng.random()
        if roll < spec.abort_share:
            req.end_by, req.finish = "abort", None
        elif roll < spec.abort_share + spec.error_share:
            req.end_by, req.finish = "error", None
        elif roll < 0.5 and ids:
            # a scheduler stop: the last id is the matched stop token
            req.finish = Stop(ids[-1])
        out.append(req)
    return out


@dataclass
class Step:
    """What a scheduler sends in one step: OPENs first, then one BATCH, then ends."""

    opens: list[bytes]
    batch: bytes | None
    ends: list[bytes]
    rows: int
    tokens: int
    starts: list[str]  # rids whose first frame is in this step (a frontend registers them)


def schedule(reqs: list[PlannedRequest], concurrency: int, rng_seed: int = 0,
             top_k: int = 5) -> Iterator[Step]:
    """Interleave requests into scheduler steps at the given concurrency."""
    rng = random.Random(rng_seed)
    waiting = list(reversed(reqs))
    active: list[tuple[PlannedRequest, int]] = []
    while waiting or active:
        opens, starts = [], []
        while waiting and len(active) < concurrency:
            req = waiting.pop()
            starts.append(req.rid)
            if req.opts is not None:
                opens.append(control.encode_control(req.opts))
            active.append((req, 0))
        rows, ends, still = [], [], []
        for req, pos in active:
            last = pos == len(req.chunks) - 1 or not req.chunks
            if req.end_by and (last or rng.random() < 0.05):
                ends.append(control.encode_control(
                    control.Abort([req.rid]) if req.end_by == "abort"
                    else control.Error(req.rid, "scheduler failed the request")))
                continue
            chunk = req.chunks[pos] if req.chunks else []
            row: dict[str, Any] = {"rid": req.rid, "ids": chunk,
                                   "finish": req.finish if last else None,
                                   "prompt_tokens": req.prompt_tokens,
                                   "cached_tokens": req.cached_tokens}
            if req.logprobs:
                row["output_logprobs"] = [[-0.25 * (j + 1), t] for j, t in enumerate(chunk)]
                row["output_top"] = [[[-0.25 * (j + 1) - q, t + q] for q in range(top_k)]
                                     for j, t in enumerate(chunk)]
            rows.append(row)
            if not last:
                still.append((req, pos + 1))
        active = still
        batch = native_batch.encode_batch(_fill_families(rows)) if rows else None
        yield Step(opens, batch, ends, len(rows), sum(len(r["ids"]) for r in rows), starts)


def _fill_families(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if any("output_logprobs" in r for r in rows):
        for r in rows:
            r.setdefault("output_logprobs", [])
            r.setdefault("output_top", [])
    return rows


def expected(req: PlannedRequest, info: TokenizerInfo) -> tuple[str, Finish | None]:
    """The protocol's reference text and finish for a request that ran to its end."""
    opts = req.opts or control.DEFAULT_OPEN_FIELDS
    vocab = info.vocab_size
    skip = opts.skip_special_tokens

    def dec(ids: list[int]) -> str:
        return info.tokenizer.decode([i for i in ids if 0 <= i < vocab], skip_special_tokens=skip)

    ids = req.ids
    fin = req.finish
    if not opts.no_stop_trim and ids and stop_token(fin, ids[-1]):
        ids = ids[:-1]
    prompt = list(opts.prompt_ids)
    text = dec(prompt + ids)[len(dec(prompt)):]
    best = None
    for s in sorted({s for s in opts.stop if s}, key=len):
        at = text.find(s)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, s)
    if best is not None:
        text = text[:best[0]] + (best[1] if opts.include_stop_str_in_output else "")
        return text, Stop(best[1])
    return text, fin


def verify(req: PlannedRequest, out: Any, info: TokenizerInfo,
           features: bool = True) -> list[str]:
    """Problems with one request's outputs (empty when it is exact). `features` False:
    leave out what only the service produces (logprobs and their texts, continuous usage),
    for the lean baselines."""
    problems = []
    if out is None:
        return [f"{req.rid}: no output at all"]
    if not out.deltas or out.deltas[-1].finish is None:
        return [f"{req.rid}: no last delta"]
    last = out.deltas[-1]
    if req.end_by:
        if not isinstance(last.finish, (Abort, Stop)):
            problems.append(f"{req.rid}: ended by {req.end_by} but finish {last.finish}")
        if req.end_by == "error" and isinstance(last.finish, Abort) and not last.error:
            problems.append(f"{req.rid}: ERROR without error message")
        return problems
    if last.error:
        return [f"{req.rid}: unexpected error {last.error!r}"]
    text, fin = expected(req, info)
    if out.text != text:
        problems.append(f"{req.rid}: text {out.text[-80:]!r} != expected {text[-80:]!r}")
    if last.finish != fin:
        problems.append(f"{req.rid}: finish {last.finish} != {fin}")
    stopped_early = fin is not None and fin != req.finish
    opts = req.opts or control.DEFAULT_OPEN_FIELDS
    if not stopped_early:
        if out.ids != req.ids:
            problems.append(f"{req.rid}: ids differ")
        want_deltas = len(req.chunks) if opts.stream else 1
        if len(out.deltas) != want_deltas:
            problems.append(f"{req.rid}: {len(out.deltas)} deltas for {want_deltas} rows")
    if last.usage is None or last.usage.completion_tokens != len(out.ids):
        problems.append(f"{req.rid}: usage {last.usage} for {len(out.ids)} ids")
    if not features:
        return problems
    if req.logprobs and not stopped_early:
        problems += _verify_logprobs(req, out, info, opts.logprob_text)
    if opts.continuous_usage and opts.stream:
        seen = 0
        for d in out.deltas:
            seen += len(d.ids)
            u = d.usage
            if u is None or u.completion_tokens != seen or \
                    u.total_tokens != u.prompt_tokens + seen:
                problems.append(f"{req.rid}: continuous usage {u} after {seen} ids")
                break
    return problems


def _verify_logprobs(req: PlannedRequest, out: Any, info: TokenizerInfo,
                     texts: bool) -> list[str]:
    """The plan sends one logprob per id, the id itself (and top alternatives id + q); with
    `logprob_text` each carries the text of its id."""
    lp = [p for d in out.deltas for p in (d.logprobs or [])]
    top = [pos for d in out.deltas for pos in (d.top_logprobs or [])]
    if [int(p[1]) for p in lp] != req.ids or len(top) != len(req.ids):
        return [f"{req.rid}: logprobs do not follow the ids"]
    if not texts:
        return []
    got = [t for d in out.deltas for t in (d.token_texts or [])]
    got_top = [pos for d in out.deltas for pos in (d.top_texts or [])]
    problems = []
    if got != [info.token_text(i) for i in req.ids]:
        problems.append(f"{req.rid}: token_texts {got[:4]} are not the ids' texts")
    if got_top != [[info.token_text(int(a[0])) for a in pos] for pos in top]:
        problems.append(f"{req.rid}: top_texts {got_top[:2]} are not the ids' texts")
    return problems


def requests_of_trace(frames: list[bytes]) -> dict[str, PlannedRequest]:
    """Rebuild each request of a recorded trace (`tracefile`) from its frames: options, ids,
    rows, and how it ended."""
    reqs: dict[str, PlannedRequest] = {}

    def get(rid: str) -> PlannedRequest:
        r = reqs.get(rid)
        if r is None:
            r = reqs[rid] = PlannedRequest(rid, [], [], None)
        return r

    for frame in frames:
        tag = frame[0] if frame else -1
        try:
            if tag == tags.TAG_BATCH:
                b = native_batch.decode_batch(frame)
                ids = b.token_ids()
                st = b.tokens.row_starts
                for i, rid in enumerate(b.rids):
                    r = get(rid)
                    if r.finish is not None or r.end_by:
                        continue
                    r.ids.extend(ids[st[i]:st[i + 1]])
                    r.chunks.append(ids[st[i]:st[i + 1]])
                    if b.header.finish_reasons[i] is not None:
                        r.finish = b.header.finish_reasons[i]
            else:
                msg = control.decode_control(frame)
                if isinstance(msg, control.Open):
                    get(msg.rid).opts = msg
                elif isinstance(msg, control.Abort):
                    for rid in msg.rids:
                        if get(rid).finish is None:
                            get(rid).end_by = get(rid).end_by or "abort"
                elif isinstance(msg, control.Error):
                    if get(msg.rid).finish is None:
                        get(msg.rid).end_by = get(msg.rid).end_by or "error"
        except errors.FrameError:
            continue
    return reqs
