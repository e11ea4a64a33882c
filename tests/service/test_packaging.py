"""The wheel installs the packages Python sees in a checkout, where they stand: `sglang_tok`
and the process folders `ring`, `egress`, `shards`, `encoders` at the top (no package-dir
mapping, so every tool reads the imports as Python resolves them); nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = {"sglang_tok", "ring", "egress", "shards", "encoders"}


def test_wheel_installs_the_checkouts_packages_and_nothing_else(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(tmp_path), str(ROOT)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    wheel = next(tmp_path.glob("sglang_tok-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == TOPS, tops
    # every package of the checkout is in the wheel (a new folder needs no listing)
    for init in [*ROOT.glob("*/__init__.py"), *ROOT.glob("*/**/__init__.py")]:
        rel = init.relative_to(ROOT).as_posix()
        if rel.split("/")[0] in TOPS:
            assert rel in names, rel
    assert "sglang_tok/py.typed" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # only the unpacked wheel and the interpreter's own library: no checkout, no editable path
    probe = ("import sys; sys.path[:] = [p for p in sys.path if 'site-packages' in p "
             f"or 'lib/python' in p]; sys.path.insert(0, {str(site)!r});"
             "import ring.sockets, egress.router, shards.main, encoders.broker;"
             "import sglang_tok.serving.cli; print(ring.__file__.startswith("
             f"{str(site)!r}))")
    r = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
