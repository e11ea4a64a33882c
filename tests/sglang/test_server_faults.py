"""kill -9 of a shard and of the egress inside a whole SGLang server in the modes the field
runs (issue 42, item 8): under --dp-size 2 (two stand-in schedulers behind SGLang's
DataParallelController) and under 2 tokenizer workers (replies go to the worker each
request came from). The server stays up, no stream hangs, no text is wrong, and new
requests after the kills are exact (`sglang_faults.demo`). Runs only with SGLANG_PYTHON;
a minute or two per mode, most of it SGLang starting up."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

import pytest
from sglang_cases import sglang_python

PYTHON = sglang_python()
pytestmark = [pytest.mark.skipif(PYTHON is None, reason="SGLANG_PYTHON unset or unusable"),
              pytest.mark.timeout(600)]


@pytest.mark.parametrize("dp,workers", [(2, 1), (1, 2)], ids=["dp2", "tm-workers2"])
def test_kill_9_shard_then_egress_server_up_none_hung_none_wrong(dp: int, workers: int) -> None:
    from sglang_tok_bench import sglang_faults as faults
    from sglang_tok_bench.sglang_server import Server, System

    assert PYTHON is not None
    # the service's ipc:// paths live in TMPDIR: pytest's own tmp_path is too long for them
    work = Path(tempfile.mkdtemp(prefix="sf-"))
    server = Server(System.parse("sglang-tok x2"), workers, PYTHON, work,
                    31830 + 2 * dp + workers, dp=dp)
    try:
        server.wait_ready()
        report = faults.demo(PYTHON, server, work, clients=32, seconds=16.0,
                             plan=[(4.0, "shard 0"), (10.0, "egress")], hang_after=15.0,
                             rng=random.Random(1))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert report["kills_by_role"] == {"egress": 1, "shard 0": 1}, report
    assert report["errored"] > 0, ("the kills cut no stream", report)
    assert report["server_alive"] and report["hung"] == 0 and report["wrong"] == 0, report
    assert report["after"]["exact"] and report["after"]["completed"] >= 24, report
    assert report["ok"], report
