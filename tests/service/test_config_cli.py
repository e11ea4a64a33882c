"""The CLI is generated from `Config`: every field is a flag with help, every constraint is
checked with an error naming the flag; exit codes and process titles of a real service."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import psutil
import pytest
from local_service import LocalService

from sglang_tok.config import Config, ConfigError, finalize, flag
from sglang_tok.process import cpu_list_text, parse_cpu_list, plan_cores
from sglang_tok.serving import cli


def serve_options() -> dict[str, str]:
    """Every option of `sglang-tok serve` (but -h), with its help text."""
    _, serve = cli.parser()
    return {opt: action.help or "" for action in serve._actions
            for opt in action.option_strings if opt not in ("-h", "--help")}


def test_every_config_field_is_a_flag_with_help_and_every_flag_a_field() -> None:
    options = serve_options()
    fields = [f.name for f in msgspec.structs.fields(Config)]
    for name in fields:
        opt = flag(name) if flag(name) in options else flag("no_" + name)
        assert opt in options, f"no flag for Config.{name}"
        assert options[opt].strip(), f"{opt} has no help"
    assert set(options) == {flag(n) for n in fields if n != "pin"} | {"--no-pin"}
    for old in ("--restart-limit", "--restart-window", "--boot-timeout", "--drain-timeout",
                "--heartbeat-timeout", "--restart-grace", "--ring-capacity", "--runtime-dir"):
        assert old in options


def test_flag_defaults_are_the_config_defaults() -> None:
    top, _ = cli.parser()
    cfg = cli.config_from(top.parse_args(["serve"]))
    assert msgspec.structs.replace(cfg, shards=1) == Config()
    cfg = cli.config_from(top.parse_args(["serve", "--no-pin", "--restart-limit", "2",
                                          "--restart-window", "7.5", "--boot-timeout", "9",
                                          "--log-level", "DEBUG"]))
    assert (cfg.pin, cfg.restart_limit, cfg.restart_window, cfg.boot_timeout,
            cfg.log_level) == (False, 2, 7.5, 9.0, "DEBUG")


@pytest.mark.parametrize("argv, words", [
    (["--shards", "0"], ["--shards: expected int >= 1 (got 0)"]),
    (["--shards", "257"], ["--shards", "<= 256"]),
    (["--ring-capacity", "0"], ["--ring-capacity", ">= 1"]),
    (["--restart-window", "0"], ["--restart-window", "> 0"]),
    (["--heartbeat-timeout", "-1"], ["--heartbeat-timeout", "> 0"]),
    (["--boot-timeout", "0"], ["--boot-timeout", "> 0"]),
    (["--restart-limit", "-1"], ["--restart-limit", ">= 0"]),
    (["--max-requests", "lots"], ["--max-requests", "invalid int value"]),
    (["--log-level", "loud"], ["--log-level", "invalid choice"]),
])
def test_bad_value_is_a_clear_error_naming_the_flag(
        argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(["serve", *argv])  # a value out of the field's bounds
    except SystemExit as exit_:  # a value argparse cannot convert
        code = exit_.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("sglang-tok serve: error: "), err
    for word in words:
        assert word in err, err


def test_config_built_in_code_gets_the_same_checks() -> None:
    with pytest.raises(ConfigError, match=r"--link-capacity: expected int >= 1 \(got 0\)"):
        finalize(Config(link_capacity=0))


def test_serve_help_documents_the_exit_codes() -> None:
    out = subprocess.run([sys.executable, "-m", "sglang_tok.serving.cli", "serve", "--help"],
                         capture_output=True, text=True, timeout=60).stdout
    assert "exit codes:" in out
    assert "3  boot failure" in out and "--boot-timeout" in out
    assert "1  a process died more than --restart-limit" in out


def test_boot_deadline_exits_with_the_boot_failure_code(tmp_path: Path) -> None:
    """Every child is later than 50 ms to its first heartbeat: killed, exit code 3."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sglang_tok.serving.cli", "serve", "--shards", "1",
                        "--runtime-dir", str(tmp_path / "rt"), "--http", "127.0.0.1:0",
                        "--boot-timeout", "0.05", "--drain-timeout", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-3000:]
    assert "failed at boot (sent no heartbeat within 0.05s of its spawn)" in r.stderr
    assert time.monotonic() - t0 < 60


def test_process_titles_and_health_lists_every_process(tmp_path: Path) -> None:
    svc = LocalService(tmp_path, shards=2).start()
    try:
        # (the other child is multiprocessing's resource tracker)
        titles = {t for t in (" ".join(p.cmdline()).strip() for p in svc.children())
                  if t.startswith("sglang-tok")}
        assert titles == {"sglang-tok: egress", "sglang-tok: shard 0", "sglang-tok: shard 1",
                          "sglang-tok: http"}
        assert " ".join(psutil.Process(svc.proc.pid).cmdline()).strip() == (  # type: ignore[union-attr]
            "sglang-tok: supervisor")
        code, h = svc.health()
        assert code == 200
        roles = {p["role"]: p for p in h["processes"]}
        assert list(roles) == ["egress", "shard 0", "shard 1", "http"]
        http_child = [p for p in svc.children() if "http" in " ".join(p.cmdline())]
        assert roles["http"]["pid"] == http_child[0].pid and roles["http"]["alive"]
    finally:
        assert svc.stop() == 0


def test_every_flag_the_docs_name_exists() -> None:
    """docs/operations.md once named a --restart-limit that no command had."""
    root = Path(__file__).resolve().parents[2]
    top, _ = cli.parser()
    subs = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    real = {opt for p in subs.choices.values() for a in p._actions for opt in a.option_strings}
    for script in [*(root / "scripts").rglob("*.py"), *(root / "examples").glob("*.py"),
                   *(root / "dev" / "sglang_tok_bench").glob("*.py"),
                   *(root / "dev" / "sglang_tok_testkit").glob("*.py")]:
        real |= set(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", script.read_text()))
    for script in (root / "scripts").rglob("*.sh"):  # a shell script's own: [ "$1" = "--x" ]
        real |= set(re.findall(r"= \"(--[a-z0-9-]+)\" \]", script.read_text()))
    # SGLang's own flags, named where the README says how to launch SGLang with the plugin
    real |= {"--model-path", "--tokenizer-path", "--detokenizer-worker-num",
             "--tokenizer-worker-num", "--skip-tokenizer-init", "--enable-metrics", "--device",
             # the serving modes docs/sglang.md names
             "--enable-dp-attention", "--dp-size", "--tp-size", "--speculative-algorithm",
             "--stream-interval", "--incremental-streaming-output", "--load-balance-method",
             "--disaggregation-mode", "--disaggregation-transfer-backend", "--nnodes",
             "--dist-init-addr"}
    real |= {"--no-deps", "--no-index", "--target"}  # pip's, in the install lines
    real |= {"--dist"}  # pytest-xdist's, in the test command
    for doc in ("docs/operations.md", "docs/kit.md", "docs/sglang.md", "README.md"):
        named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", (root / doc).read_text()))
        assert named - real == set(), f"{doc} names flags that do not exist"


@pytest.mark.parametrize("text, cores", [
    ("0", [0]), ("0-3,8", [0, 1, 2, 3, 8]), ("8,0-2,1", [0, 1, 2, 8]), ("62-63", [62, 63])])
def test_cpu_lists_read_and_write_as_taskset_and_cpusets_do(text: str, cores: list[int]) -> None:
    assert parse_cpu_list(text) == cores
    assert parse_cpu_list(cpu_list_text(cores)) == cores
    assert cpu_list_text([8, 0, 1, 2, 3, 10]) == "0-3,8,10"


@pytest.mark.parametrize("cores, words", [
    ("3-1", "the range '3-1' runs backwards"),
    ("1,", "'' is not a core"),
    ("1-", "'1-' is not a core"),
    ("0-x", "--cores: expected str matching regex"),
    ("0-9", "--cores: not usable here: 4-9 (this process may run on 0-3)"),
    ("0-1", "--cores: 2 cores for the egress and 2 shards: give at least 3"),
])
def test_cores_are_refused_unless_usable_and_enough(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cores: str, words: str) -> None:
    monkeypatch.setattr("sglang_tok.config.usable_cores", lambda: [0, 1, 2, 3])
    with pytest.raises(ConfigError, match=re.escape(words)):
        finalize(Config(runtime_dir=str(tmp_path / "rt"), shards=2, cores=cores))
    cfg = finalize(Config(runtime_dir=str(tmp_path / "rt"), shards=2, cores="3,1-2"))
    assert cfg.pin_cores == [1, 2, 3]
    assert plan_cores(2, True, cfg.pin_cores) == ([2, 3], 1, "")
    assert plan_cores(2, False, cfg.pin_cores)[:2] == ([None, None], None)
    # unpinned, any cores will do: --cores is not used
    finalize(Config(runtime_dir=str(tmp_path / "rt"), shards=2, cores="0", pin=False))
