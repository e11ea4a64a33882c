"""Every serving mode of SGLang answered by the plugin as by SGLang's own detokenizer: each
mode (`sglang_tok_testkit/serving_modes.py`) runs a whole server twice on the same stand-in streams,
stock then plugin, with the same requests; every text is the stand-in's ledger's (the
full decode of the ids it sent, after stops), every meta_info key is on both with the same
value (clocks aside), and stopping the launcher leaves no process of the server behind.

Runs only with SGLANG_PYTHON (a python importing SGLang 0.5.23 and sglang_tok), one
server at a time, about 40 s each (SGLANG_MODES=dp,engine picks modes):

    SGLANG_PYTHON=/tmp/sglv/bin/python .venv/bin/python -m pytest -q tests/sglang/test_standin_modes.py
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sglang_cases import sglang_python
from standin_release import Ledger, Server

from sglang_tok_testkit.processes import PACKAGE_FOLDERS
from sglang_tok_testkit.serving_modes import (
    MODES,
    PLUGINS,
    STANDIN,
    Mode,
    meta_differences,
    replies,
)
from sglang_tok_testkit.sglang_side import model_dir

PYTHON = sglang_python()
pytestmark = [pytest.mark.skipif(PYTHON is None, reason="SGLANG_PYTHON unset or unusable"),
              pytest.mark.timeout(420)]
_wanted = {m for m in os.environ.get("SGLANG_MODES", "").split(",") if m}
CHOSEN = [m for m in MODES if not _wanted or m.name in _wanted]
PORT = 32400
# a stopped launcher's whole tree is gone by then: SGLang drains (up to 5 s), waits up to
# 15 s for its schedulers to exit, then kills the rest (DP's controller among them); the
# stand-in's ranks exit at once, a server stops in about 5 s, so 40 s is a loaded box's bound
STOP_S = 40.0


class Run:
    """One server's (or Engine's) replies, in the order asked, and what went wrong."""

    def __init__(self) -> None:
        self.outs: list[list[dict[str, Any]]] = []
        self.wrong: list[str] = []
        self.stop_s = 0.0


def collect(url: str, body: dict[str, Any], incremental: bool) -> list[dict[str, Any]]:
    """One /generate's final replies, one per sequence: a stream's chunks gathered per
    `index` (n > 1 interleaves them), each text whole (chunks are compared no further)."""
    req = urllib.request.Request(url + "/generate", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        return _collect(req, body, incremental)
    except urllib.error.HTTPError as exc:  # an aborted request: its status and error body
        return [{"http_status": exc.code, "error": json.loads(exc.read() or b"{}")}]


def _collect(req: urllib.request.Request, body: dict[str, Any], incremental: bool
             ) -> list[dict[str, Any]]:
    with urllib.request.urlopen(req, timeout=120) as r:
        if not body.get("stream"):
            return replies(json.loads(r.read()))
        last: dict[int, dict[str, Any]] = {}
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            out = json.loads(line[5:])
            at = int(out.get("index", 0) or 0)
            before = last.get(at)
            if incremental and before is not None:
                out = {**out, "text": before.get("text", "") + out.get("text", ""),
                       "output_ids": before.get("output_ids", []) + out.get("output_ids", [])}
            last[at] = out
    return [last[k] for k in sorted(last)]


def asks_of(mode: Mode, ledger: Ledger) -> list[dict[str, Any]]:
    if not mode.ids_only:
        return [dict(a) for a in mode.requests()]
    return [{"input_ids": ledger.tok.encode(a["text"], add_special_tokens=False).ids,
             **{k: v for k, v in a.items() if k != "text"}} for a in mode.requests()]


def check_ledger(run: Run, ledger: Ledger, ids_only: bool) -> None:
    """Every sequence's text (or ids) is what the stand-in sent."""
    seen = ledger.entries()
    for outs in run.outs:
        for out in outs:
            if "http_status" in out or ("error" in out and "meta_info" not in out):
                continue  # an abort's error reply: compared with stock's whole, below
            if "meta_info" not in out:
                run.wrong.append(f"a reply without meta_info: {str(out)[:200]}")
                continue
            rid = out["meta_info"]["id"]
            e = seen.get(rid)
            if e is None:
                run.wrong.append(f"{rid}: not in the ledger")
            elif ids_only:
                ids = out.get("output_ids")
                if ids not in (list(e.ids), list(e.ids[:-1])):
                    run.wrong.append(f"{rid}: ids {str(ids)[:60]} != {str(e.ids)[:60]}")
            elif out["text"] != ledger.text(e):
                run.wrong.append(f"{rid}: {out['text'][:60]!r} != {ledger.text(e)[:60]!r}")


def serve(mode: Mode, kind: str, work: Path, port: int) -> Run:
    """Start, ask, check against the ledger, stop the launcher alone, see what is left."""
    assert PYTHON is not None
    run = Run()
    work.mkdir(parents=True, exist_ok=True)
    s = Server(PYTHON, os.pathsep.join(PACKAGE_FOLDERS), work, port, standin=",".join(filter(None, (
        STANDIN, mode.standin))), env={"SGLANG_PLUGINS": PLUGINS[kind]}, args=mode.args)
    try:
        s.wait_ready()
        ledger = Ledger(s.ledger)
        asks = asks_of(mode, ledger)
        incremental = "--incremental-streaming-output" in mode.args
        if mode.together:
            with ThreadPoolExecutor(len(asks)) as pool:
                run.outs = list(pool.map(lambda a: collect(s.url, a, incremental), asks))
        else:
            run.outs = [collect(s.url, a, incremental) for a in asks]
        time.sleep(0.3)  # the ledger line is written after the step that ended a request
        check_ledger(run, ledger, mode.ids_only)
        took, left = s.stop_alone(STOP_S)
        run.stop_s = took
        run.wrong += [f"{kind}: left after the launcher's stop ({took:.1f} s): {p}"
                      for p in left]
    except Exception as exc:
        text = f"{kind}: {exc}".replace("\n", " | ")
        run.wrong.append(text if len(text) < 900 else f"{text[:300]} ... {text[-500:]}")
    finally:
        s.stop()
    return run


def offline(mode: Mode, kind: str, work: Path) -> Run:
    """The offline Engine in its own python: generate, shutdown, nothing left."""
    assert PYTHON is not None
    run = Run()
    work.mkdir(parents=True, exist_ok=True)
    ledger_path = work / "ledger.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(PACKAGE_FOLDERS),
           "SGLANG_PLUGINS": PLUGINS[kind],
           "SGLANG_TOK_STANDIN": f"step_ms=5,length=40,ledger={ledger_path},{STANDIN}"}
    asks = [{**a, "stream": False} for a in mode.requests()]
    done = subprocess.run([PYTHON, "-m", "sglang_tok_standin.offline_engine",
                           str(model_dir(work)), json.dumps(asks)], env=env, cwd=work,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        run.wrong.append(f"{kind}: the Engine exited {done.returncode}: {done.stderr[-800:]}")
        return run
    report = json.loads(done.stdout.strip().splitlines()[-1])
    run.outs = [replies(o) for o in report["outs"]]
    check_ledger(run, Ledger(ledger_path), False)
    run.wrong += [f"{kind}: left after shutdown(): {p}" for p in report["left"]]
    return run


@pytest.mark.parametrize("mode", CHOSEN, ids=[m.name for m in CHOSEN])
def test_the_plugin_serves_each_mode_as_stock_does(mode: Mode, tmp_path: Path) -> None:
    at = PORT + 2 * MODES.index(mode)
    runs = {kind: offline(mode, kind, tmp_path / kind) if mode.engine
            else serve(mode, kind, tmp_path / kind, at + i)
            for i, kind in enumerate(PLUGINS)}
    wrong = [w for r in runs.values() for w in r.wrong]
    stock, plugin = runs["stock"], runs["plugin"]
    if not wrong:
        assert len(stock.outs) == len(plugin.outs)
        for k, (a, b) in enumerate(zip(stock.outs, plugin.outs)):
            if len(a) != len(b):
                wrong.append(f"ask {k}: {len(a)} sequences != {len(b)}")
            for j, (x, y) in enumerate(zip(a, b)):
                if "meta_info" not in x or "meta_info" not in y:  # error replies
                    if x != y:
                        wrong.append(f"ask {k}.{j}: stock's {str(x)[:200]} != the plugin's "
                                     f"{str(y)[:200]}")
                    continue
                wrong += meta_differences(x["meta_info"], y["meta_info"], f"ask {k}.{j} ")
                if x.get("text") != y.get("text") or x.get("output_ids") != y.get("output_ids"):
                    wrong.append(f"ask {k}.{j}: stock and plugin differ")
    stops = ", ".join(f"{k} stopped in {r.stop_s:.1f} s" for k, r in runs.items())
    (tmp_path / "differences.txt").write_text("\n".join([stops, *wrong]))  # read meanwhile
    assert not wrong, "\n".join(wrong)
