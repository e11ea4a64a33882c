"""The wheel is the service: it installs the packages Python sees in a checkout, where they
stand (`sglang_tok` and the process folders `ring`, `egress`, `shards` at the top, no
package-dir mapping), and nothing of the tests, the tools or the stand-in scheduler: those
are distributions of their own (`standin/`, `dev/`), and the only SGLang plugin a user's
SGLang finds in it is the service's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = {"sglang_tok", "ring", "egress", "shards"}


def _wheel(folder: Path, out: Path, name: str) -> list[str]:
    """The wheel of a copy of `folder` (setuptools leaves build/ where it builds)."""
    src = out / "src"
    shutil.copytree(folder, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".hypothesis", "tests", "dev",
        "standin" if folder == ROOT else "build"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(out), str(src)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    return zipfile.ZipFile(next(out.glob(f"{name}-*.whl"))).namelist()


def _entry_points(names: list[str], wheel: Path) -> str:
    at = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    return zipfile.ZipFile(wheel).read(at).decode()


def test_the_wheel_is_the_service_and_nothing_else(tmp_path: Path) -> None:
    names = _wheel(ROOT, tmp_path, "sglang_tok")
    wheel = next(tmp_path.glob("sglang_tok-*.whl"))
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == TOPS, tops
    # every package of the checkout's own folders is in the wheel (a new one needs no listing)
    for init in [*ROOT.glob("*/__init__.py"), *ROOT.glob("*/**/__init__.py")]:
        rel = init.relative_to(ROOT).as_posix()
        if rel.split("/")[0] in TOPS:
            assert rel in names, rel
    assert "sglang_tok/py.typed" in names
    assert not [n for n in names if "harness" in n or "standin" in n or "testkit" in n
                or "_bench" in n], "a test, tool or stand-in module in the wheel"
    plugins = _entry_points(names, wheel).split("[sglang.srt.plugins]")[1].split("[")[0]
    assert [line.split("=")[0].strip() for line in plugins.splitlines() if "=" in line] == [
        "sglang_tok"]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # only the unpacked wheel and the interpreter's own library: no checkout, no editable
    # path; the demo's modules among them (`sglang-tok demo` runs from the wheel alone)
    probe = ("import sys; sys.path[:] = [p for p in sys.path if 'site-packages' in p "
             f"or 'lib/python' in p]; sys.path.insert(0, {str(site)!r});"
             "import ring.sockets, egress.router, shards.main, sglang_tok.encoders.broker;"
             "import sglang_tok.serving.cli, sglang_tok.serving.demo;"
             "print(ring.__file__.startswith("
             f"{str(site)!r}) and sglang_tok.serving.demo.__file__.startswith({str(site)!r}))")
    r = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_the_stand_in_is_a_distribution_of_its_own(tmp_path: Path) -> None:
    """Whoever load tests SGLang installs it (`pip install ./standin`): its own plugin."""
    names = _wheel(ROOT / "standin", tmp_path, "sglang_tok_standin")
    wheel = next(tmp_path.glob("sglang_tok_standin-*.whl"))
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sglang_tok_standin"}, tops
    assert "sglang_tok_standin = sglang_tok_standin.plugin:register" in _entry_points(
        names, wheel)
