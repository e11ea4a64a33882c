"""The SGLang plugin: its entry point, what it costs to import, the launcher it installs
(run for real, without SGLang), and, where a python that imports SGLang 0.5.23 exists
(`SGLANG_PYTHON`, or the side environment of `shared/tools/sglang-venv.sh`), the plugin
inside SGLang's own launcher code:

    SGLANG_PYTHON=$(bash ../shared/tools/sglang-venv.sh) && $SGLANG_PYTHON -m pip install -q -e . -e ./standin
    SGLANG_PYTHON=... .venv/bin/python -m pytest tests/sglang -k "sglang or plugin"
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import types
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from sglang_cases import GOLDEN, sglang_python

from sglang_tok.integrations.sglang import launcher, plugin
from sglang_tok.kit.local_service import http_get
from sglang_tok.protocols.sglang.layout import known
from sglang_tok.protocols.sglang.layout import read as read_layout

HERE = Path(__file__).resolve().parent


def test_entry_point_names_register() -> None:
    eps = {ep.name: ep for ep in entry_points(group="sglang.srt.plugins")}
    assert eps["sglang_tok"].value == "sglang_tok.integrations.sglang.plugin:register"
    # the module as imported now: another test may have dropped it from sys.modules since
    # this file imported it (the suite runs files in any order, on any worker)
    here = importlib.import_module("sglang_tok.integrations.sglang.plugin")
    assert eps["sglang_tok"].load() is here.register


def test_importing_the_plugin_imports_nothing_of_sglang() -> None:
    code = ("import sys, sglang_tok.integrations.sglang.plugin, sglang_tok.serving.cli; "
            "print(sorted(m for m in sys.modules if m == 'sglang' or m.startswith('sglang.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_msgpack_ipc_in_the_environment_and_in_a_module_that_read_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("sglang.srt.managers.io_struct")
    fake._USE_PICKLE_IPC = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang.srt.managers.io_struct", fake)
    monkeypatch.setenv(plugin.PICKLE_IPC, "1")
    plugin.use_msgpack_ipc()
    assert os.environ[plugin.PICKLE_IPC] == "0"
    assert fake._USE_PICKLE_IPC is False  # type: ignore[attr-defined]


def _serving(tmp: Path, **kw: object) -> types.SimpleNamespace:
    base: dict[str, object] = {"tokenizer_path": str(tmp), "skip_tokenizer_init": False,
                               "detokenizer_worker_num": 1}
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_service_args_from_sglangs_settings(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    ports = types.SimpleNamespace(detokenizer_ipc_name="ipc:///x/detok",
                                  tokenizer_ipc_name="ipc:///x/tok")
    args = launcher.service_args(_serving(tmp_path), ports)
    assert args[:6] == ["--protocol", "sglang", "--input", "ipc:///x/detok", "--output",
                        "ipc:///x/tok"]
    assert args[args.index("--tokenizer") + 1] == str(tmp_path)
    # SGLang's default, one detokenizer, unpinned as its own (not the host's size): one
    # shard, inside the egress's process
    assert args[args.index("--shards") + 1] == "1" and "--no-pin" in args
    assert "--inline-shard" in args
    # a request that does not stream comes in one row of all its ids
    assert int(args[args.index("--max-row-ids") + 1]) >= 1 << 20
    # a shard importing SGLang on a busy host is not killed at boot for being slow
    assert float(args[args.index("--boot-timeout") + 1]) >= 120
    workers = launcher.service_args(_serving(tmp_path, tokenizer_worker_num=3), ports,
                                    frozenset({7, 3}))
    assert workers[workers.index("--sglang-tokenizer-workers") + 1] == "3"
    assert workers[workers.index("--keep-stop-ids") + 1] == "3,7"
    four = launcher.service_args(_serving(tmp_path, detokenizer_worker_num=4), ports)
    assert four[four.index("--shards") + 1] == "4" and "--inline-shard" not in four
    none = launcher.service_args(_serving(tmp_path, skip_tokenizer_init=True), ports)
    assert none[none.index("--tokenizer") + 1] == "none"


def test_sglangs_own_process_tree_is_its_ipc_or_its_single_node_loopback_port() -> None:
    """Pickles are unpickled only from SGLang's own tree: ipc://, or the loopback tcp://
    endpoint SGLang's single-node launcher derives for DP attention; never a multi-node
    endpoint other hosts' schedulers reach."""
    one = types.SimpleNamespace(nnodes=1, dist_init_addr=None)
    assert launcher.own_tree("ipc:///tmp/x", one)
    assert launcher.own_tree("tcp://127.0.0.1:30235", one)
    assert not launcher.own_tree("tcp://10.0.0.5:30235", one)
    two = types.SimpleNamespace(nnodes=2, dist_init_addr="10.0.0.5:5000")
    assert not launcher.own_tree("tcp://127.0.0.1:30235", two)
    named = types.SimpleNamespace(nnodes=1, dist_init_addr="127.0.0.1:5000")
    assert not launcher.own_tree("tcp://127.0.0.1:5001", named)
    ports = types.SimpleNamespace(detokenizer_ipc_name="tcp://127.0.0.1:30235",
                                  tokenizer_ipc_name="tcp://127.0.0.1:30234")
    serving = types.SimpleNamespace(tokenizer_path=None, skip_tokenizer_init=True)
    assert "--sglang-own-tree" in launcher.service_args(serving, ports, own_tree=True)
    assert "--sglang-own-tree" not in launcher.service_args(serving, ports)


def test_settings_are_read_where_each_release_keeps_them() -> None:
    """Without SGLang's `runtime_context` (before about 0.5.19), its ServerArgs hold the
    settings the plugin reads."""
    args = types.SimpleNamespace(tokenizer_path="x", enable_metrics=True)
    serving, observability = launcher.settings(args)
    assert serving.tokenizer_path == "x" and observability.enable_metrics


def test_a_tokenizer_without_tokenizer_json_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(launcher.TokenizerNotFound, match="tokenizer.json"):
        launcher.tokenizer_of(str(tmp_path), False)
    with pytest.raises(launcher.TokenizerNotFound, match="no-such-org/no-such-model"):
        launcher.tokenizer_of("no-such-org/no-such-model", False)


def test_launched_service_is_what_sglangs_watchdog_and_shutdown_expect(tmp_path: Path) -> None:
    """pid, is_alive(), exitcode and terminate(), on the real service it launches."""
    ports = types.SimpleNamespace(detokenizer_ipc_name=f"ipc://{tmp_path}/detok.ipc",
                                  tokenizer_ipc_name=f"ipc://{tmp_path}/tok.ipc")
    args = launcher.service_args(_serving(tmp_path, tokenizer_path=None,
                                          skip_tokenizer_init=True), ports)
    proc = launcher.launch([*args, "--shards", "1"], known("0.5.20"))
    try:
        deadline = time.monotonic() + 60
        while proc.http_port() is None and time.monotonic() < deadline:
            assert proc.is_alive(), proc.exitcode
            time.sleep(0.1)
        port = proc.http_port()
        assert port is not None
        while http_get(port, "/health")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http_get(port, "/health")[0] == 200
        assert proc.is_alive() and proc.exitcode is None and proc.pid > 0
        runtime = Path(proc.runtime_dir)
        assert runtime.is_dir()
        # the running SGLang's layout, written for the service, which reads it
        assert known("0.5.20") == read_layout(str(runtime / launcher.LAYOUT_FILE))
    finally:
        proc.terminate()
        proc.join(30)
    assert proc.exitcode == 0  # a drained stop: SGLang's watchdog reads 0 as no crash
    assert not proc.is_alive()
    assert not runtime.exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_plugin_in_sglangs_own_launcher(tmp_path: Path, workers: int) -> None:
    """SGLang's code loads the plugin, launches the service in its detokenizer's place,
    and its own decoder reads every reply as a BatchStrOutput: the golden cases give the
    manifest's texts, SGLang's finishes and ids; a killed shard and egress end their
    requests with aborts and the service stays what SGLang's watchdog sees as alive."""
    python = sglang_python()
    if python is None:
        pytest.skip("SGLANG_PYTHON names no python importing SGLang 0.5.23 and sglang_tok")
    env = {**os.environ, "SGLANG_PLUGINS": "sglang_tok"}
    env.pop("SGLANG_USE_PICKLE_IPC", None)  # the plugin must set it
    run = subprocess.run([python, str(HERE / "real_sglang.py"), str(GOLDEN), str(tmp_path),
                          str(workers)], capture_output=True, text=True, timeout=280, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["pickle_ipc"] is False and report["env"] == "0"
    assert report["hooked"] == launcher.__name__ and report["names"] == ["detokenizer"]
    for case, got in report["cases"].items():
        assert got["finished"] == got["requests"] == got["exact"], case
        assert got["finish_same"] and got["ids_same"], case
    for kind in ("shard", "egress"):
        got = report["faults"][kind]
        assert got["ended"] == 8 and got["alive"], kind
        # the egress holds every request; one shard of two holds some
        assert got["aborts"] == 8 if kind == "egress" or workers == 1 else got["aborts"] >= 1
    assert report["alive"] and report["exitcode"] == 0
