"""Where the stand-in scheduler's ids come from, in place of a model: a synthetic stream
per request, or the streams a real server's scheduler sent, recorded (`record.py`).

A stream is an iterator of the ids each step accepts for one request: one id on the
request's first step (the prefill samples one), then `ids_per_step` (more than one is
speculative decoding). The scheduler's own rules end it (EOS, stop strings,
`max_new_tokens`); a recorded stream that runs dry ends as it ended when recorded.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from .requests import Ask, Finish


class Stream:
    """One request's ids, step by step: a step's chunk is the ids it accepted, or None
    when the request is not in that step's batch (no row). `end` is how it ends when the
    ids run out (a recorded stream's finish). `logprobs`, where a recording has them,
    gives each chunk's values (`Chunk`); else the stand-in makes them up."""

    __slots__ = ("chunks", "end", "logprobs")

    def __init__(self, chunks: Iterator[list[int] | None], end: Finish | None = None,
                 logprobs: Iterator[ChunkLogprobs] | None = None) -> None:
        self.chunks = chunks
        self.end = end
        self.logprobs = logprobs


class ChunkLogprobs(msgspec.Struct, frozen=True):
    """One chunk's output logprobs, one entry per id (SGLang's per-row columns)."""

    val: list[float]
    top_val: list[list[float]]
    top_idx: list[list[int]]


class Synthetic:
    """Endless streams cut from a corpus of token ids: request k's output starts at an
    offset chosen by a hash of its prompt, runs `length` ids (varied per request within
    `spread`), then EOS, then goes on (a request with `ignore_eos` keeps generating)."""

    def __init__(self, corpus: Sequence[Sequence[int]], eos: int, length: int = 256,
                 spread: float = 0.5, ids_per_step: int = 1, by_prompt: bool = False) -> None:
        flat = [t for text in corpus for t in text]
        if not flat:
            raise ValueError("an empty corpus")
        self.ids = flat
        self.eos = eos
        self.length = max(1, length)
        self.spread = min(max(spread, 0.0), 1.0)
        self.ids_per_step = max(1, ids_per_step)
        self.by_prompt = by_prompt

    def stream(self, ask: Ask, index: int) -> Stream:
        key = zlib.crc32(f"{ask.input_ids}".encode() if self.by_prompt
                         else f"{ask.input_ids}/{index}".encode())
        mean = ask.length or self.length
        lo = max(1, round(mean * (1 - self.spread)))
        hi = max(lo, round(mean * (1 + self.spread)))
        length = lo + key % (hi - lo + 1)
        return Stream(self._chunks(key % len(self.ids), length,
                                   ask.ids_per_step or self.ids_per_step))

    def _chunks(self, at: int, length: int, per_step: int) -> Iterator[list[int] | None]:
        ids = self._ids(at, length)
        yield [next(ids)]
        while True:
            yield list(itertools.islice(ids, per_step))

    def _ids(self, at: int, length: int) -> Iterator[int]:
        flat, n = self.ids, len(self.ids)
        while True:
            for i in range(length):
                yield flat[(at + i) % n]
            yield self.eos
            at += length


class Replayed:
    """Recorded streams, handed to arriving requests in the order they were recorded
    (request k gets recording k modulo their count): the same ids per step, ending as
    they ended unless the new request's own rules end it first; a recording's output
    logprobs go with its ids where it has them (`record.Recorded`, or (chunks, end))."""

    def __init__(self, recordings: Sequence[Any]) -> None:
        if not recordings:
            raise ValueError("the trace holds no request")
        self.recordings = list(recordings)

    def stream(self, ask: Ask, index: int) -> Stream:
        rec = self.recordings[index % len(self.recordings)]
        if isinstance(rec, tuple):
            chunks, end, logprobs = rec[0], rec[1], None
        else:
            chunks, end, logprobs = rec.chunks, rec.end, rec.logprobs
        given = None
        if logprobs is not None:  # one per chunk that has ids, as the steps ask for them
            given = iter([lp for chunk, lp in zip(chunks, logprobs) if chunk])
        return Stream(iter(chunks), end or {"type": "length", "length": sum(map(len, chunks))},
                      given)


def synthetic_logprob(tid: int, pos: int) -> float:
    """A deterministic logprob for an id at a position (what a model would have said)."""
    return -((tid * 31 + pos * 7) % 997) / 200.0


def top_logprobs(tid: int, pos: int, k: int, vocab: int) -> tuple[list[float], list[int]]:
    """k alternatives, the sampled id first, values descending."""
    base = synthetic_logprob(tid, pos)
    return ([base - 0.5 * q for q in range(k)],
            [tid] + [(tid + 7919 * q) % vocab for q in range(1, k)])


def input_logprobs(ask: Ask, vocab: int) -> dict[str, list[Any]]:
    """The prompt's logprob columns for a request's first row: from `logprob_start_len`
    (SGLang starts at the prompt's end when a request asks for output logprobs only), the
    first position without a value."""
    ids = list(ask.input_ids)
    start = len(ids) if ask.logprob_start_len < 0 else min(ask.logprob_start_len, len(ids))
    span = ids[start:]
    vals: list[float | None] = [None] + [synthetic_logprob(t, -1 - i)
                                         for i, t in enumerate(span[1:])] if span else []
    top_val: list[Any] = []
    top_idx: list[Any] = []
    if ask.top_logprobs_num > 0 and span:
        tops = [top_logprobs(t, -1 - i, ask.top_logprobs_num, vocab)
                for i, t in enumerate(span[1:])]
        top_val = [None] + [v for v, _ in tops]
        top_idx = [None] + [i for _, i in tops]
    return {"input_token_logprobs_val": vals, "input_token_logprobs_idx": span,
            "input_top_logprobs_val": top_val, "input_top_logprobs_idx": top_idx,
            "input_token_ids_logprobs_val": [], "input_token_ids_logprobs_idx": []}
