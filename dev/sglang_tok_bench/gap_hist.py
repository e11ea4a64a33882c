"""Gaps between a stream's chunks as a histogram: several client processes' gaps add up
to one percentile without sending every gap (a 16-core run streams a million a window).
Plain Python: the clients run in SGLang's environment, the bench in the project's."""

from __future__ import annotations

GAP_BIN_MS = 0.5
GAP_BINS = 20_000  # up to 10 s; longer gaps count in the last bin


def gap_histogram(gaps: list[float]) -> list[int]:
    """The gaps in 0.5 ms bins: what several client processes add up to one percentile."""
    hist = [0] * GAP_BINS
    for g in gaps:
        hist[min(GAP_BINS - 1, int(g * 1000 / GAP_BIN_MS))] += 1
    return hist


def percentile(hist: list[int], q: float) -> float:
    """The q-quantile in ms (a bin's middle) of a gap histogram; nan when it is empty."""
    total = sum(hist)
    if not total:
        return float("nan")
    seen, rank = 0, q * total
    for b, n in enumerate(hist):
        seen += n
        if seen > rank:
            return (b + 0.5) * GAP_BIN_MS
    return (len(hist) - 0.5) * GAP_BIN_MS
