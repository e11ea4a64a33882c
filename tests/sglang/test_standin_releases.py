"""The stand-in scheduler in whole SGLang servers of several releases, SGLang's own
detokenizer serving it: every /generate text (streamed and not, a stop string, special
tokens kept) is the full decode of the ids the stand-in's ledger says it sent; and traces
replayed across releases: one in 0.5.16's form replayed by 0.5.13 (pickle IPC), one the
plugin recorded on 0.5.23 replayed by 0.5.20.

Runs only with SGLANG_PYTHON (a python that imports SGLang and sglang_tok) and, for each
release other than that python's own, its folder from SGLANG_RELEASE_SITES
(`/tmp/sgl-site-{release}`, see standin_release.py); a release not there is skipped.
SGLANG_STANDIN_RELEASES picks the releases (default 0.5.13,0.5.16,0.5.20,0.5.23; `all`
for 0.5.12-0.5.23). About 40 s of SGLang start-up per server, one server at a time.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from sglang_cases import sglang_python
from standin_release import ASKS, RELEASES, Ledger, check, generate, release_path, server

PYTHON = sglang_python()
pytestmark = [pytest.mark.skipif(PYTHON is None, reason="SGLANG_PYTHON unset or unusable"),
              pytest.mark.timeout(900)]
_wanted = os.environ.get("SGLANG_STANDIN_RELEASES", "0.5.13,0.5.16,0.5.20,0.5.23")
CHOSEN = RELEASES if _wanted == "all" else [r.strip() for r in _wanted.split(",") if r]
PORT = 31900


def path_of(release: str) -> str:
    assert PYTHON is not None
    path = release_path(release, PYTHON)
    if path is None:
        pytest.skip(f"SGLang {release} is not installed (SGLANG_RELEASE_SITES)")
    return path


@pytest.mark.parametrize("release", CHOSEN)
def test_the_stand_in_serves_each_release_exactly(release: str, tmp_path: Path) -> None:
    path = path_of(release)
    assert PYTHON is not None
    with server(PYTHON, path, tmp_path, PORT + CHOSEN.index(release)) as s:
        checked, exact, wrong = check(s.url, Ledger(s.ledger))
        assert checked == 2 * len(ASKS) and exact == checked, wrong
        # a streamed request arrives in several chunks, each extending the last
        streamed = generate(s.url, ASKS[1])
        assert streamed["chunks"] > 3


def replayed_exactly(url: str, ledger: Ledger, recorded: list[list[int]], n: int) -> None:
    """n requests on a replaying server: each text the decode of its ids, and those ids a
    recorded stream's (cut where the new request's own rules end it)."""
    outs = [generate(url, {"text": f"again {i}", "stream": True,
                           "sampling_params": {"max_new_tokens": 1000}}) for i in range(n)]
    seen = ledger.entries()
    for out in outs:
        e = seen[out["meta_info"]["id"]]
        assert out["text"] == ledger.text(e)
        assert e.ids and any(r[:len(e.ids)] == e.ids for r in recorded), e.ids


def test_a_trace_of_one_release_replays_on_another(tmp_path: Path) -> None:
    """Golden messages in 0.5.16's form (its layout in the trace) replayed by 0.5.13,
    which speaks pickles and has 42 fields."""
    from test_standin_replay import write_trace

    from sglang_tok_standin.trace_reader import recordings

    path = path_of("0.5.13")
    trace = write_trace(tmp_path / "t.trace", "0.5.16", "random")
    recorded = [[t for c in chunks for t in c] for chunks, _ in recordings(trace)]
    assert PYTHON is not None
    with server(PYTHON, path, tmp_path, PORT + 20, standin=f"trace={trace}") as s:
        replayed_exactly(s.url, Ledger(s.ledger), recorded, 6)


def test_a_trace_the_plugin_recorded_replays_on_an_older_release(tmp_path: Path) -> None:
    """The plugin (sglang-tok as SGLang 0.5.23's detokenizer) records a trace with its
    layout; SGLang 0.5.20 replays it with its own detokenizer."""
    from sglang_tok.tracefile import read
    from sglang_tok_standin.trace_reader import read_trace

    newest, older = path_of("0.5.23"), path_of("0.5.20")
    trace = tmp_path / "recorded.trace"
    assert PYTHON is not None
    with server(PYTHON, newest, tmp_path, PORT + 21,
                env={"SGLANG_TOK_RECORD": str(trace),
                     "SGLANG_PLUGINS": "sglang_tok,sglang_tok_standin"}) as s:
        checked, exact, wrong = check(s.url, Ledger(s.ledger), rounds=1)
        assert exact == checked == len(ASKS), wrong
    meta = read(trace).meta
    layout = msgspec.convert(meta.get("sglang_layout") or {}, dict)
    assert layout.get("release", "0.5.23") == "0.5.23"
    got = read_trace(trace)
    assert got.requests and got.fields.release == "0.5.23"
    recorded = [[t for c in r.chunks for t in c] for r in got.requests]
    with server(PYTHON, older, tmp_path, PORT + 22, standin=f"trace={trace}") as s:
        replayed_exactly(s.url, Ledger(s.ledger), recorded, 4)


def test_what_cannot_be_replayed_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    from standin_release import Server
    from test_standin_replay import write_trace

    release = next((r for r in ("0.5.20", *CHOSEN)
                    if PYTHON is not None and release_path(r, PYTHON)), None)
    if release is None:
        pytest.skip("no SGLang release installed")
    trace = write_trace(tmp_path / "bad.trace", "0.5.16", "plain",
                        meta={"sglang_layout": None})  # 0.5.16's messages, said 0.5.23's
    assert PYTHON is not None
    s = Server(PYTHON, path_of(release), tmp_path, PORT + 23, standin=f"trace={trace}")
    try:
        with pytest.raises(RuntimeError, match="the server exited"):
            s.wait_ready()
    finally:
        s.stop()
    log = s.log_path.read_text()
    lines = [line for line in log.splitlines() if "BatchTokenIDOutput messages" in line]
    assert len(lines) == 1 and "not SGLang 0.5.23's (53 fields)" in lines[0]
    assert "StandinRefused" not in log  # no traceback of the stand-in's
