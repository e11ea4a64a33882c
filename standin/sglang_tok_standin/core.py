"""The stand-in scheduler's steps, without sockets: requests wait, run in a bounded batch,
take their stream's ids each step, end by SGLang's rules, and each step's rows are one
`BatchTokenIDOutput`'s columns (`rows.StepRows`).

What ended is kept in `ended` (rid, the ids through the stop, the finish): the ledger a
benchmark checks every streamed text against.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from sglang_tok.protocols.sglang.wire import BeamOutput, BeamSequence, WeightVersionSpan

from .requests import Ask, Decode, Finish, Request, finish_abort, finish_stop
from .step_columns import Logprobs, StepRows
from .streams import ChunkLogprobs, Stream, input_logprobs, synthetic_logprob, top_logprobs

# a PD decode server's abort of a request whose KV cache did not arrive (as SGLang words it)
TRANSFER_FAILED = "Failed to receive KV cache from the prefill server (stand-in)"
_DRY: Any = object()  # what a stream that ran out of ids gives


class Source(Protocol):
    def stream(self, ask: Ask, index: int) -> Stream: ...


class EndedRequest:
    """What the ledger keeps of an ended request."""

    __slots__ = ("rid", "ids", "finish", "ask", "beams")

    def __init__(self, req: Request) -> None:
        self.rid = req.rid
        self.ids = list(req.output_ids_through_stop)
        self.finish = req.finished_reason
        self.ask = req.ask
        self.beams = [list(s.tokens) for s in req.beams.sequences] if req.beams else None


# a finished beam group's sequences: (tokens, finish, cum_logprob) -> SGLang's
# BeamSearchOutput (or `BeamOutput` where SGLang is not)
MakeBeams = Callable[[list[tuple[list[int], Finish, float]]], Any]


class Core:
    """Requests in, one step's columns out."""

    def __init__(self, source: Source, decode: Decode | None, eos: frozenset[int],
                 vocab: int, make_beams: MakeBeams, max_running: int = 1024,
                 stream_interval: int = 1, dp_rank: int = 0,
                 wrap: Callable[[Any], Any] | None = None,
                 time_stats: Callable[[], Any] | None = None,
                 span: Callable[..., Any] | None = None, speculative: bool = False) -> None:
        self.source = source
        self.decode = decode
        self.eos = eos
        self.vocab = vocab
        self.make_beams = make_beams
        self.max_running = max_running
        self.stream_interval = stream_interval
        self.dp_rank = dp_rank
        self.wrap = wrap
        self.new_time_stats = time_stats
        self.span = span
        # SGLang's scheduler with --speculative-algorithm counts verify steps per request
        # and sends them per row; its TokenizerManager then reads them for every row
        self.speculative = speculative
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.arrived = 0
        self.ended: list[EndedRequest] = []
        self.steps = 0
        self.ids = 0  # output ids generated (what the detokenizer decodes)

    # ------------------------------------------------------------------ intake
    def add(self, ask: Ask) -> None:
        req = Request(ask, self.source.stream(ask, self.arrived))
        self.arrived += 1
        if ask.return_logprob:
            req.logprobs = Logprobs(input_logprobs(ask, self.vocab))
        if self.new_time_stats is not None:
            req.time_stats = self.new_time_stats()
            _stamp(req, "wait_queue_entry_time")
        self.waiting.append(req)

    def abort(self, rid: str, abort_all: bool, message: str | None) -> list[str]:
        """SGLang's `abort_request`: a running request ends at the next step with an
        abort; a waiting one leaves at once (its rid is returned: the scheduler tells the
        TokenizerManager with an AbortReq of its own)."""
        hit = (lambda r: True) if abort_all else (lambda r: r.rid.startswith(rid))
        gone = [r for r in self.waiting if hit(r)]
        if gone:
            self.waiting = deque(r for r in self.waiting if not hit(r))
        for req in self.running:
            if not req.finished() and hit(req):
                req.to_finish = finish_abort(message, 503) if message else finish_abort()
        return [r.rid for r in gone]

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------------ a step
    def step(self) -> dict[str, Any] | None:
        """Admit, run every running request one step, and the step's columns (None when
        no request has a row)."""
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting.popleft()
            _stamp(req, "forward_entry_time")
            self.running.append(req)
        if not self.running:
            return None
        self.steps += 1
        rows = StepRows(any(r.ask.return_logprob for r in self.running), self.decode,
                        self.stream_interval, self.dp_rank, self.wrap,
                        WeightVersionSpan if self.span is None else self.span,
                        speculative=self.speculative)
        still: list[Request] = []
        for req in self.running:
            if self._advance(req):
                rows.accept(req)
            if req.finished() and req.finished_output:
                _stamp(req, "completion_time")
                self.ended.append(EndedRequest(req))
            else:
                still.append(req)
        self.running = still
        return rows.columns() if len(rows) else None

    def _advance(self, req: Request) -> bool:
        """Run req one step; False when it is not in this step's batch."""
        if req.finished():
            return True
        first = not req.output_ids
        if first and req.ask.abort_first:  # its KV transfer failed: a row without ids
            req.to_finish = finish_abort(TRANSFER_FAILED, 500)
            req.extend([], self.decode, self.eos)
            return True
        # an aborted request still runs the step it was told in (SGLang applies
        # `to_finish` after the step's ids are in)
        ids = next(req.stream.chunks, _DRY)
        if ids is None:
            return False
        if ids is _DRY:  # a recording ran dry: it ends as it ended
            ids = []
            if req.to_finish is None:
                req.to_finish = req.stream.end
        if req.ask.sampling.beam_width > 1:
            self._advance_beams(req, ids)
            return True
        if ids:
            self.ids += len(ids)
            if self.speculative and not first:  # the prefill samples; decode steps verify
                req.verified(len(ids))
            if req.logprobs is not None:
                self._logprobs(req, ids, next(req.stream.logprobs, None)
                               if req.stream.logprobs is not None else None)
        req.extend(ids, self.decode, self.eos)
        if first:
            _stamp(req, "prefill_finished_time")
        return True

    def _logprobs(self, req: Request, ids: list[int], given: ChunkLogprobs | None) -> None:
        """The step's output logprobs: a recording's own values where it has one per id
        (its top logprobs where the request asks for as many as it recorded), the rest
        made up as a model would give them."""
        lp, ask = req.logprobs, req.ask
        at = len(req.output_ids)
        if given is not None and len(given.val) != len(ids):
            given = None
        k = ask.top_logprobs_num
        given_tops = given is not None and k > 0 and len(given.top_val) == len(ids) \
            and all(len(v) == k for v in given.top_val)
        for j, tid in enumerate(ids):
            pos = at + j
            lp.val.append(given.val[j] if given is not None else synthetic_logprob(tid, pos))
            lp.idx.append(tid)
            if given_tops:
                assert given is not None
                lp.top_val.append(given.top_val[j])
                lp.top_idx.append(given.top_idx[j])
            elif k > 0:
                val, idx = top_logprobs(tid, pos, k, self.vocab)
                lp.top_val.append(val)
                lp.top_idx.append(idx)
            if ask.token_ids_logprob:
                lp.ids_val.append([synthetic_logprob(t, pos) for t in ask.token_ids_logprob])
                lp.ids_idx.append(list(ask.token_ids_logprob))

    def _advance_beams(self, req: Request, ids: list[int]) -> None:
        """A beam group as its leader shows it: a placeholder 0 per step in output_ids
        (SGLang's DAG holds the history) and one row at the end, carrying n sequences.
        Here the best beam is the stream itself and beam j is it with its last id moved
        by j, so that every sequence is ids the tokenizer decodes."""
        if req.to_finish is not None:  # an aborted group returns no sequences
            req.update_finish_state(0, None, self.eos)
            return
        s = req.ask.sampling
        for tid in ids:
            req.beam_ids.append(tid)
            self.ids += 1
            if (tid in self.eos or tid in s.stop_token_ids) and not s.ignore_eos:
                req.to_finish = finish_stop(tid)
                break
            if len(req.beam_ids) >= s.max_new_tokens:
                req.to_finish = {"type": "length", "length": s.max_new_tokens}
                break
        req.output_ids.append(0)
        if req.to_finish is None:
            return
        best = list(req.beam_ids)
        seqs = [(best, req.to_finish, _cum(best))]
        for j in range(1, max(1, min(s.n, s.beam_width))):
            alt = best[:-1] + [(best[-1] + 7919 * j) % self.vocab] if best else []
            seqs.append((alt, {"type": "length", "length": len(alt)}, _cum(alt) - j))
        req.beams = self.make_beams(seqs)
        req.update_finish_state(0, None, self.eos)



def wire_beams(seqs: list[tuple[list[int], Finish, float]]) -> BeamOutput:
    """A finished group's sequences as SGLang's BeamSearchOutput, without SGLang."""
    return BeamOutput(sequences=[
        BeamSequence(tokens=ids, cum_logprob=cum, finish_reason=fin,
                     beam_score=cum / max(1, len(ids))) for ids, fin, cum in seqs])


def _cum(ids: list[int]) -> float:
    return sum(synthetic_logprob(t, i) for i, t in enumerate(ids))


def _stamp(req: Request, name: str) -> None:
    if req.time_stats is not None:
        setattr(req.time_stats, name, time.perf_counter())


__all__ = ["Core", "EndedRequest", "Source", "wire_beams"]
