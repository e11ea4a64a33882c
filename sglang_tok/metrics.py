"""Prometheus metrics, aggregated across processes by prometheus-client's multiprocess mode.

The supervisor points PROMETHEUS_MULTIPROC_DIR at the runtime directory before it
spawns anything, so every process writes its samples to its own files and the HTTP
process merges them: a restarted shard's counts are kept, its live gauge is dropped.
Observations are made per message or per frame, never per row.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

# per-frame metrics counted in a process (LocalCounter, LocalHistogram) go to the shared
# multiprocess files at most this often (and before a barrier's PONG, and at exit)
PUBLISH_EVERY_S = 0.1
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0)
DROP_REASONS = ("unknown_tag", "empty", "truncated", "header", "columns", "finish", "ragged",
                "data_length", "body", "limit_rid_length", "limit_row_ids", "internal")


class Metrics:
    """Every metric of the service; each process touches only its own."""

    def __init__(self) -> None:
        self.frames = Counter("sglang_tok_frames", "Input frames drained from the ring, by tag",
                              ["tag"])
        self.dropped = Counter("sglang_tok_frames_dropped",
                               "Input frames dropped whole, by reason", ["reason"])
        self.rows = Counter("sglang_tok_rows", "BATCH rows decoded", ["shard"])
        self.tokens = Counter("sglang_tok_tokens", "Token ids decoded", ["shard"])
        self.late_rows = Counter("sglang_tok_late_rows",
                                 "Rows and frames for rids that had already ended", ["shard"])
        self.ignored_opens = Counter("sglang_tok_ignored_opens",
                                     "OPEN frames for rids already live", ["shard"])
        self.rejected = Counter("sglang_tok_rejected_requests",
                                "New rids refused at --max-requests", ["shard"])
        self.paths = Counter("sglang_tok_requests_by_path",
                             "Requests by the path their rows take in the shard: array, or "
                             "the reason for the per-row path (docs/protocol.md section 10)",
                             ["shard", "path"])
        self.terminal_errors = Counter("sglang_tok_terminal_errors",
                                       "Terminal error deltas sent by the service", ["reason"])
        self.live = Gauge("sglang_tok_live_requests", "Live requests per shard", ["shard"],
                          multiprocess_mode="livesum")
        self.decode_seconds = Histogram("sglang_tok_decode_seconds",
                                        "Time to decode one egress message", ["shard"],
                                        buckets=LATENCY_BUCKETS)
        self.frame_latency = Histogram("sglang_tok_frame_latency_seconds",
                                       "Ring receive to delta send, per frame and shard",
                                       buckets=LATENCY_BUCKETS)
        self.iteration = Histogram("sglang:iteration_tokens_total",
                                   "Tokens per scheduler iteration (new ids plus computed "
                                   "prompt tokens of first rows)", ["model_name", "engine"],
                                   buckets=ITERATION_BUCKETS)
        self.restarts = Counter("sglang_tok_restarts", "Child process restarts", ["role"])
        # encode service (encoders/): the broker counts requests, errors and its queue;
        # each worker its texts, tokens and time
        self.encode_requests = Counter("sglang_tok_encode_requests",
                                       "Encode requests received by the broker")
        self.encode_texts = Counter("sglang_tok_encode_texts", "Texts encoded")
        self.encode_tokens = Counter("sglang_tok_encode_tokens", "Token ids produced by encode")
        self.encode_seconds = Histogram("sglang_tok_encode_seconds",
                                        "Time a worker spent on one encode request",
                                        buckets=LATENCY_BUCKETS)
        self.encode_queue = Gauge("sglang_tok_encode_queue_depth",
                                  "Encode requests waiting for an idle worker",
                                  multiprocess_mode="livesum")
        self.encode_errors = Counter("sglang_tok_encode_errors",
                                     "Encode error replies, by reason", ["reason"])


class LocalCounter:
    """A counter child counted in this process and added to the shared one by `flush`.

    In multiprocess mode every `inc` is a locked write to a memory-mapped file (about a
    microsecond); a per-frame metric paid that on every frame, which at 16 concurrent
    requests is a tenth of a frame's cost. Here a frame adds to an int, and the hot loop
    flushes a few times a second and before it answers a barrier (so a scrape after a
    barrier sees every frame before it)."""

    __slots__ = ("target", "count")

    def __init__(self, target: Any) -> None:
        self.target, self.count = target, 0

    def inc(self, n: int = 1) -> None:
        self.count += n

    def flush(self) -> None:
        if self.count:
            self.target.inc(self.count)
            self.count = 0


class LocalHistogram:
    """A histogram child observed in this process and added to the shared one by `flush`
    (see `LocalCounter`): each bucket's count and the sum go in with one write each.

    prometheus-client has no batch observe; this adds to the child's own bucket and sum
    values, as its `observe` does (a bucket is the first upper bound >= the value; the
    test holds the two to the same exposition)."""

    __slots__ = ("target", "bounds", "counts", "total")

    def __init__(self, target: Any) -> None:
        self.target = target
        self.bounds: list[float] = list(target._upper_bounds)
        self.counts = [0] * len(self.bounds)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def flush(self) -> None:
        counts = self.counts
        if not any(counts):
            return
        for i, n in enumerate(counts):
            if n:
                self.target._buckets[i].inc(n)
        self.target._sum.inc(self.total)
        self.counts = [0] * len(self.bounds)
        self.total = 0.0
