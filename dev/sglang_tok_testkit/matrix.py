"""The version matrix (`scripts/sglang/matrix.py`): every SGLang release with plugin hooks
(0.5.12-0.5.23), each as its own whole server with the stand-in scheduler, SGLang's own
detokenizer against the plugin on the same requests (`matrix_compare.PROBES`), one row
per release: started, texts exact, replies equal to stock's, refused.

A release other than the side environment's own is laid out first (`releases.lay_out`:
its wheel without dependencies, `pip install --no-deps --target`, on PYTHONPATH); a folder
laid out before is reused. One server at a time: the stand-in hands out streams in arrival
order, so the two servers of a release get the same ids only if the requests come one at
a time in the same order.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from sglang_tok.protocols.sglang.layout import known, known_releases
from sglang_tok_standin.ledger import Entry, Ledger
from sglang_tok_testkit import releases as rel
from sglang_tok_testkit.matrix_compare import (
    Probe,
    Row,
    Side,
    Texts,
    chat_texts,
    compare,
    generate_texts,
    normalized,
    probes,
    table,
)

LEDGER_WAIT_S = 5.0


def has_beam_search(release: str, python: str, path: str) -> bool:
    """From the release's layout as this project keeps it, else read from the release."""
    if release in known_releases():
        return bool(known(release).beam_output)
    return rel.beam_search(python, path)


def _ask(url: str, probe: Probe, timeout: float) -> Any:
    """A probe's reply; an HTTP error as `{"error": status, "body": ...}` (compared with
    stock's like any reply)."""
    try:
        if probe.route == "chat":
            return rel.chat(url, probe.body, timeout)
        return rel.generate(url, probe.body, timeout)
    except urllib.error.HTTPError as exc:
        return {"error": exc.code, "body": exc.read().decode(errors="replace")[:300]}


def _wanted(reply: Any, probe: Probe) -> tuple[set[str], int]:
    """The rids a reply names and how many entries with ids its request ends with."""
    if probe.route == "chat":
        return set(), len(reply.get("choices") or ()) if isinstance(reply, dict) else 0
    items = reply if isinstance(reply, list) else [reply]
    rids = {str((i.get("meta_info") or {}).get("id")) for i in items
            if isinstance(i, dict) and "meta_info" in i}
    return rids, len(rids)


def _entries(ledger: Ledger, rids: set[str], count: int) -> list[Entry]:
    """A request's ledger entries: the stand-in writes each after the step that ended it,
    which may be after the reply left."""
    got: list[Entry] = []
    deadline = time.monotonic() + LEDGER_WAIT_S
    while True:
        got += ledger.new()
        seen = {e.rid for e in got}
        if (rids <= seen and sum(bool(e.ids) for e in got) >= count) \
                or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def serve(release: str, python: str, path: str, work: Path, plugin: bool,
          asks: Sequence[Probe], timeout: float = 300.0) -> Side:
    """One server of a release, every probe in order, stopped."""
    side = Side()
    s = rel.Server(python, path, work, plugin=plugin)
    try:
        s.wait_ready(timeout)
        side.started = True
        ledger = Ledger(s.ledger)
        _entries(ledger, set(), 0)  # the ready request's
        ledger.new()
        for probe in asks:
            reply = _ask(s.url, probe, 120)
            entries = _entries(ledger, *_wanted(reply, probe))
            side.replies[probe.name] = normalized(reply)
            if isinstance(reply, dict) and "error" in reply:
                continue
            got = chat_texts(reply, entries, ledger.decode, release) \
                if probe.route == "chat" else \
                generate_texts(reply, entries, ledger.decode, release)
            _merge(side.texts, got, probe.name)
        if plugin and s.detokenizer() != "sglang-tok":
            side.error = f"the detokenizer was {s.detokenizer()}, not sglang-tok"
    except rel.ServerExited as exc:
        side.refusal = exc.refusal or ""
        side.error = "" if exc.refusal else _line(str(exc))
    except Exception as exc:  # a row says what failed; the next release still runs
        side.error = _line(f"{type(exc).__name__}: {exc}")
    finally:
        s.stop()
    return side


def _merge(into: Texts, got: Texts, name: str) -> None:
    into.checked += got.checked
    into.exact += got.exact
    into.wrong += [f"{name} {w}" for w in got.wrong]


def _line(text: str, width: int = 300) -> str:
    text = " | ".join(part.strip() for part in text.splitlines() if part.strip())
    return text if len(text) <= width else "..." + text[-width:]


def run_release(release: str, python: str, work: Path, sites: str = rel.DEFAULT_SITES,
                wheels: str = rel.DEFAULT_WHEELS, lay_out: bool = True,
                timeout: float = 300.0) -> Row:
    """Lay the release out (if asked), serve it with stock's detokenizer, then the
    plugin's, compare."""
    row = Row(release)
    try:
        if lay_out:
            rel.lay_out(release, python, sites, wheels)
        path = rel.site_path(release, python, sites)
    except (rel.LayOutError, OSError) as exc:
        row.stock.error = _line(str(exc))
        return row
    if path is None:
        row.stock.error = f"SGLang {release} is not installed ({sites})"
        return row
    asks = probes(has_beam_search(release, python, path))
    row.stock = serve(release, python, path, work / release / "stock", False, asks, timeout)
    row.plugin = serve(release, python, path, work / release / "plugin", True, asks,
                       timeout)
    return compare(row)


def run(chosen: Sequence[str], python: str, work: Path,
        on_row: Callable[[Row], None] = lambda row: None, **kw: Any) -> list[Row]:
    rows = []
    for release in chosen:
        row = run_release(release, python, work, **kw)
        on_row(row)
        rows.append(row)
    return rows


def main(args: argparse.Namespace) -> int:
    """Prints the table (a line per release as it ends, then the whole); 0 when every
    release was served or refused in one line at start (`scripts/sglang/matrix.py`'s
    flags)."""
    # a TERM (timeout, kill) unwinds through each server's `stop`: none is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="sglang-matrix-"))
    chosen = rel.parse_releases(args.releases)
    print(f"# {len(chosen)} releases, work in {work}", flush=True)

    def progress(row: Row) -> None:
        print(table([row]).splitlines()[1], flush=True)

    rows = run(chosen, args.sglang_python, work, progress, sites=args.sites,
               wheels=args.wheels, lay_out=not args.no_lay_out, timeout=args.timeout)
    print()
    print(table(rows))
    if args.verbose:
        for row in rows:
            for note in row.notes:
                print(f"{row.release}: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{**msgspec.to_builtins(r), "served": r.served} for r in rows], indent=1))
    return 0 if all(r.served or r.refused for r in rows) else 1


def add_cli_args(ap: argparse.ArgumentParser) -> None:
    """The flags of `scripts/sglang/matrix.py` (its `main` parses them)."""
    ap.add_argument("--releases", default="all",
                    help="`all`, or releases and spans: 0.5.16,0.5.20-0.5.23")
    ap.add_argument("--sglang-python", default=rel.DEFAULT_PYTHON,
                    help="the side environment's python (SGLang and sglang-tok installed)")
    ap.add_argument("--sites", default=rel.DEFAULT_SITES,
                    help="each release's folder ({release} filled in)")
    ap.add_argument("--wheels", default=rel.DEFAULT_WHEELS,
                    help="where wheels are found, or downloaded to")
    ap.add_argument("--no-lay-out", action="store_true",
                    help="only the releases already laid out; download nothing")
    ap.add_argument("--work", default="", help="servers' logs and ledgers (default: a temp "
                                               "folder)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a server has to start")
    ap.add_argument("--json", default="", help="also write every row, in full, here")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="after the table, every note of every row")
