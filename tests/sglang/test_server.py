"""A whole SGLang server (its launcher, HTTP server and TokenizerManager) with the stand-in
scheduler, SGLang's own detokenizer against the plugin: streaming clients on three
endpoints, every text against the full decode of what the stand-in sent; with
--enable-metrics, `meta_info` and /metrics as stock's; beam search as stock's; a trace
recorded by one server replayed by another. Runs only with SGLANG_PYTHON (a python that
imports SGLang 0.5.23 and this checkout: `bash ../shared/tools/sglang-venv.sh`, then
`pip install -e . -e ./standin` into it); a few minutes of wall time, most of it SGLang starting up.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from sglang_cases import sglang_python

PYTHON = sglang_python()
pytestmark = [pytest.mark.skipif(PYTHON is None, reason="SGLANG_PYTHON unset or unusable"),
              pytest.mark.timeout(900)]
BEAM = {"text": "Hello world", "sampling_params": {"max_new_tokens": 6, "beam_width": 3,
                                                   "n": 2}}


def post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def metric_names(url: str) -> set[str]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    # the HTTP layer's series name the endpoints that were called (SGLang's own start-up
    # calls /freeze_gc when it can): the series that are the engine's are compared
    return {line.split(" ")[0] for line in text.splitlines()
            if line and not line.startswith(("#", "sglang:http_")) and "_bucket" not in line}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """SGLang's detokenizer, and the plugin with 2 shards recording a trace; both with
    --enable-metrics."""
    from sglang_tok_bench import sglang_server as bench

    work = tmp_path_factory.mktemp("server")
    trace = work / "recorded.trace"
    assert PYTHON is not None
    stock = bench.Server(bench.System.parse("sglang x1"), 1, PYTHON, work, 31811,
                         args=("--enable-metrics",))
    plugin = bench.Server(bench.System.parse("sglang-tok x2"), 1, PYTHON, work, 31812,
                          args=("--enable-metrics",), env={"SGLANG_TOK_RECORD": str(trace)})
    try:
        stock.wait_ready()
        plugin.wait_ready()
        yield {"stock": stock, "plugin": plugin, "work": work, "trace": trace,
               "bench": bench}
    finally:
        stock.stop()
        plugin.stop()


def test_streams_on_three_endpoints_are_exact(servers: dict[str, Any]) -> None:
    bench = servers["bench"]
    # two client processes: their windows, CPU and gap histograms add up to one run
    args = argparse.Namespace(sglang_python=PYTHON, seconds=4.0, warmup=1.0, client_procs=2,
                              drain=30.0)
    for name in ("stock", "plugin"):
        server = servers[name]
        run = bench.run_load(server, bench.Load(24, 2, 0.1), args, servers["work"],
                             bench.Expected(server.ledger))
        assert run.errors == 0 and run.cut_off == 0, (name, run)
        assert run.checked >= 24 and run.exact == run.checked, (name, run)
        assert run.ids_per_s > 0


def test_meta_info_and_metrics_as_stock(servers: dict[str, Any]) -> None:
    body = {"text": "Hello world", "sampling_params": {"max_new_tokens": 5}}
    stock = post(servers["stock"].url + "/generate", body)["meta_info"]
    # a process that cuts the pickled columns loads SGLang's classes in the background
    # after it starts (seconds): until then they go as nil
    deadline = time.monotonic() + 60
    while True:
        plugin = post(servers["plugin"].url + "/generate", body)["meta_info"]
        if set(plugin) == set(stock) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert set(plugin) == set(stock), set(plugin) ^ set(stock)
    for key in ("forward_entry_time", "prefill_finished_time", "queue_time"):
        assert key in plugin  # the scheduler's per-request timings
    time.sleep(6)  # the detokenizer's CPU seconds are reported every 5 s
    want, got = metric_names(servers["stock"].url), metric_names(servers["plugin"].url)
    assert 'sglang:process_cpu_seconds_total{component="detokenizer"}' in got
    assert got == want, got ^ want


def test_beam_search_as_stock(servers: dict[str, Any]) -> None:
    """Each returned sequence's text is the full decode of the stand-in's sequence (its
    stop token trimmed), through SGLang's detokenizer and through the plugin alike."""
    bench = servers["bench"]
    outs = {name: post(servers[name].url + "/generate", BEAM) for name in ("stock", "plugin")}
    shapes = []
    for name, out in outs.items():
        want = bench.Expected(servers[name].ledger)
        want._read()
        entry = want.seen[out["meta_info"]["id"]]
        results = out["meta_info"]["beam_results"]
        assert len(results) == len(entry["beams"]) == 2
        for result, tokens in zip(results, entry["beams"]):
            fin = result["meta_info"]["finish_reason"]
            assert result["output_ids"] == tokens
            assert result["text"] == want.text({**entry, "ids": tokens, "finish": fin})
        assert out["text"] == results[0]["text"] and out["text"]
        shapes.append([sorted(r["meta_info"]) for r in results])
    assert shapes[0] == shapes[1]


def test_a_recorded_trace_replays_on_another_server(servers: dict[str, Any]) -> None:
    bench = servers["bench"]
    servers["plugin"].stop()  # the trace is whole once its egress has closed it
    trace = servers["trace"]
    assert trace.stat().st_size > 0
    replay = bench.Server(bench.System.parse("sglang-tok x1"), 1, PYTHON, servers["work"],
                          31813, standin=f"trace={trace}")
    try:
        replay.wait_ready()
        out = post(replay.url + "/generate", {"text": "again",
                                              "sampling_params": {"max_new_tokens": 1000}})
        want = bench.Expected(replay.ledger)
        want._read()
        entry = want.seen[out["meta_info"]["id"]]
        assert out["text"] == want.text(entry) and out["output_ids"] == entry["ids"]
        from sglang_tok_standin.trace_reader import recordings

        recorded = [[t for chunk in chunks for t in chunk] for chunks, _ in recordings(trace)]
        assert out["output_ids"] in recorded  # one of the recorded server's streams
    finally:
        replay.stop()
