"""A whole SGLang server of one release (0.5.12-0.5.23) with the stand-in scheduler and
SGLang's own detokenizer, and the streams it serves checked against the stand-in's
ledger: each finished text is the full decode of the ids the stand-in sent.

The release's SGLang is put ahead of SGLANG_PYTHON's own by PYTHONPATH: SGLANG_RELEASE_SITES
is a template of os.pathsep-separated folders, `{release}` in each filled in
(`/tmp/sgl-site-{release}`); a folder that does not exist is left out, and a release with
none runs on SGLANG_PYTHON's own SGLang when that is the release. This checkout comes
first, so the stand-in run is the one under test.

    python tests/sglang/standin_release.py 0.5.20 [0.5.13 ...]   # by hand: one line each
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sglang_tok_standin.ledger import Ledger
from sglang_tok_testkit.releases import Server, generate, server, site_path

ROOT = Path(__file__).resolve().parents[2]

SITES_ENV = "SGLANG_RELEASE_SITES"
RELEASES = [f"0.5.{n}" for n in range(12, 24)]
# the prompts each check sends: streaming and not, a stop string, a small max_new_tokens
ASKS: list[dict[str, Any]] = [
    {"text": "Once upon a time", "stream": True, "sampling_params": {"max_new_tokens": 64}},
    {"text": "The quick brown fox", "stream": True,
     "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}},
    {"text": "Hello world", "stream": False, "sampling_params": {"max_new_tokens": 48}},
    {"text": "A list of things", "stream": True,
     "sampling_params": {"max_new_tokens": 200, "stop": ["the"]}},
    {"text": "Numbers", "stream": True,
     "sampling_params": {"max_new_tokens": 100, "skip_special_tokens": False}},
    {"text": "Short", "stream": True, "sampling_params": {"max_new_tokens": 1}},
]
__all__ = ["ASKS", "RELEASES", "Ledger", "Server", "check", "generate", "release_path",
           "run", "server"]


def release_path(release: str, python: str) -> str | None:
    """The PYTHONPATH that imports `release`'s SGLang (this checkout first; the folders
    SGLANG_RELEASE_SITES names, none without it), or None where it is not installed."""
    return site_path(release, python, os.environ.get(SITES_ENV, ""))


def check(url: str, ledger: Ledger, rounds: int = 2) -> tuple[int, int, list[str]]:
    """Every ask `rounds` times, a few at once: (checked, exact, what differed)."""
    asks = [a for _ in range(rounds) for a in ASKS]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda a: generate(url, a), asks))
    time.sleep(0.2)  # the ledger line is written after the step that ended it
    seen = ledger.entries()
    checked = exact = 0
    wrong: list[str] = []
    for ask, out in zip(asks, outs):
        e = seen.get(out["meta_info"]["id"])
        if e is None:
            wrong.append(f"{ask['text']!r}: not in the ledger")
            continue
        checked += 1
        want = ledger.text(e)
        if out["text"] == want and out["meta_info"]["completion_tokens"] == len(e.ids):
            exact += 1
        else:
            wrong.append(f"{ask['text']!r}: {out['text'][:60]!r} != {want[:60]!r} "
                         f"({out['meta_info']['completion_tokens']} vs {len(e['ids'])} ids)")
    return checked, exact, wrong


def run(release: str, python: str, work: Path, port: int) -> dict[str, Any]:
    """Start, check, stop: one row of the per-release table."""
    row: dict[str, Any] = {"release": release, "started": False, "exact": "",
                           "notes": ""}
    path = release_path(release, python)
    if path is None:
        row["notes"] = "not installed"
        return row
    work.mkdir(parents=True, exist_ok=True)
    s = Server(python, path, work, port)
    try:
        row["startup_s"] = round(s.wait_ready(), 1)
        row["started"] = True
        checked, exact, wrong = check(s.url, Ledger(s.ledger))
        row["exact"] = f"{exact}/{checked}"
        row["notes"] = "; ".join(wrong[:3])
    except Exception as exc:  # a row says what failed
        row["notes"] = str(exc).replace("\n", " | ")[-400:]
    finally:
        s.stop()
    return row


def main() -> None:
    python = os.environ.get("SGLANG_PYTHON", "/tmp/sglv/bin/python")
    base = Path(tempfile.mkdtemp(prefix="standin-releases-"))
    for i, release in enumerate(sys.argv[1:] or RELEASES):
        row = run(release, python, base / release, 32100 + i)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
