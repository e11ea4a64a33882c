"""Figures and tables: percentiles, medians and ratios (NaN where a system was not run),
Markdown tables, and the JSON a benchmark writes."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


# -------------------------------------------------------------------------- statistics
def percentile(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by rank; NaN for no samples."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio(a: float, b: float) -> float:
    """a / b; NaN where b is 0 or NaN (a figure of a system that was not run)."""
    return a / b if b and b == b else float("nan")


def times(x: float, digits: int = 2) -> str:
    """A ratio as `1.23x`, or `-` where it is NaN."""
    return f"{x:.{digits}f}x" if x == x else "-"


def span(text: str) -> tuple[int, int]:
    """`k` or `lo-hi` as (lo, hi)."""
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


# ----------------------------------------------------------------------------- tables
def markdown(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table; cells are printed as given (format them first)."""
    lines = [markdown_row(head), "|" + "---|" * len(head)]
    lines += [markdown_row(row) for row in rows]
    return "\n".join(lines)


def markdown_row(cells: Sequence[object]) -> str:
    """One row of a Markdown table (for tables printed a row at a time)."""
    return "| " + " | ".join(map(str, cells)) + " |"


def ratio_table(figures: Mapping[str, float], base: str, heading: tuple[str, str],
                fmt: str = ",.0f", width: int = 20, suffix: str = "") -> str:
    """One line per case: its figure and its ratio to `base`'s (`heading`: the case and
    figure columns' titles; `suffix`: a unit or a word after each ratio)."""
    ref = figures[base]
    lines = [f"{heading[0]:<{width}} {heading[1]:>22} {'ratio':>8}"]
    for name, x in figures.items():
        lines.append(f"{name:<{width}} {x:>22{fmt}} {times(ratio(x, ref)):>8}{suffix}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------- JSON
def write_json(path: str | Path, obj: Any) -> None:
    """The figures as JSON at `path`, its folder made if need be."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, indent=1))


def strip(obj: Any) -> Any:
    """A summary without its series: every key starting with `_` left out, at any depth."""
    if isinstance(obj, dict):
        return {k: strip(v) for k, v in obj.items() if not str(k).startswith("_")}
    return obj


def finite(obj: Any) -> Any:
    """The figures with NaN (a ratio to a system not run) as null, so the JSON is JSON."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite(v) for v in obj]
    return obj
