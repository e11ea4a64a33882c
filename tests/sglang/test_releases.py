"""The plugin inside every SGLang release with plugin hooks (0.5.12-0.5.23), each release's
own code around it: its plugin loading, its `Engine` launcher, its messages, its decoder
(`release_dropin.py`), every reply as that release's own DetokenizerManager answered; and a
release the plugin cannot serve refused at start in one line, or handed to SGLang's own
detokenizer when the user asks (SGLANG_TOK_FALLBACK=1).

Runs with SGLANG_PYTHON (SGLang 0.5.23's side environment, `../shared/tools/sglang-venv.sh`,
with this checkout installed) and, for the other releases, SGLANG_RELEASE_SITES: a pattern
such as `/tmp/sgl-site-{release}` naming each release's `pip install --no-deps --target`
folder (`../shared/tools/sglang-versions.sh` or `scripts/sglang/matrix.py` lay them out).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sglang_cases import sglang_python

from sglang_tok.protocols.sglang.layout import LAST_TESTED, known_releases
from sglang_tok_standin.kernel import FOLDER as KERNEL_STANDIN

HERE = Path(__file__).resolve().parent
RELEASES = HERE.parent / "golden" / "sglang" / "releases"
PYTHON = sglang_python()
SITES = os.environ.get("SGLANG_RELEASE_SITES", "")
pytestmark = [pytest.mark.skipif(PYTHON is None, reason="SGLANG_PYTHON unset or unusable"),
              pytest.mark.timeout(600)]


def site(release: str) -> str | None:
    """PYTHONPATH for a release: its folder (and the kernel stand-in), or none for the
    side environment's own release."""
    if release == LAST_TESTED:
        return ""
    if not SITES:
        return None
    path = SITES.format(release=release)
    return f"{path}:{KERNEL_STANDIN}" if Path(path).is_dir() else None


def run(code_or_script: list[str], release: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    assert PYTHON is not None
    path = site(release)
    if path is None:
        pytest.skip(f"no folder for SGLang {release} (SGLANG_RELEASE_SITES)")
    full = {**os.environ, "SGLANG_PLUGINS": "sglang_tok", **env}
    full["PYTHONPATH"] = ":".join(p for p in (path, full.get("PYTHONPATH", "")) if p)
    return subprocess.run([PYTHON, "-W", "ignore", *code_or_script], capture_output=True,
                          text=True, timeout=300, cwd=tmp, env=full)


@pytest.mark.parametrize("release", known_releases())
def test_the_plugin_inside_each_release(release: str, tmp_path: Path) -> None:
    r = run([str(HERE / "release_dropin.py"), str(RELEASES / release), str(tmp_path)],
            release, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["release"] == release
    assert report["hooked"] == "sglang_tok.integrations.sglang.launcher"
    for case, got in report["cases"].items():
        assert got["exact"] == got["requests"] == got["rows_as_sglang"], (case, got)
    assert report["alive"] and report["exitcode"] == 0


REFUSE = """
import sys
from sglang_tok.protocols.sglang import layout
real = layout.read_running
def lacking():
    got = real()
    return type(got)(**{**{f: getattr(got, f) for f in got.__struct_fields__},
                        "token_ids": tuple(f for f in got.token_ids if f != "read_offsets")})
layout.read_running = lacking
from sglang.srt.entrypoints.engine import Engine
from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import PortArgs, ServerArgs
from sglang_tok_testkit.sglang_side import model_dir
load_plugins()
mdir = model_dir(sys.argv[1])
args = ServerArgs(model_path=str(mdir), tokenizer_path=str(mdir), device="cpu")
ports = PortArgs.init_new(args)
from sglang.srt.runtime_context import publish
publish(args, role="tokenizer")
procs, names = Engine._launch_detokenizer_subprocesses(
    server_args=args, port_args=ports, run_detokenizer_process_func=run_detokenizer_process)
print("LAUNCHED", type(procs[0]).__module__, names)
for p in procs:
    p.terminate()
"""


def test_a_release_the_plugin_cannot_serve_is_refused_in_one_line(tmp_path: Path) -> None:
    r = run(["-c", REFUSE, str(tmp_path)], LAST_TESTED, tmp_path)
    assert r.returncode == 1 and "LAUNCHED" not in r.stdout
    lines = [line for line in r.stderr.splitlines() if line.startswith("sglang_tok:")]
    assert len(lines) == 1, r.stderr[-2000:]
    assert f"SGLang {LAST_TESTED}" in lines[0] and "read_offsets" in lines[0]
    assert "0.5.12-0.5.23" in lines[0] and "SGLANG_TOK_FALLBACK=1" in lines[0]
    assert "Traceback" not in r.stderr
    fallback = run(["-c", REFUSE, str(tmp_path)], LAST_TESTED, tmp_path,
                   SGLANG_TOK_FALLBACK="1")
    assert fallback.returncode == 0, fallback.stderr[-2000:]
    assert "LAUNCHED multiprocessing" in fallback.stdout  # SGLang's own detokenizer
    said = [line for line in fallback.stderr.splitlines() if "SGLang's own detokenizer" in line]
    assert len(said) == 1
