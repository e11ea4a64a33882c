"""The wheel claims one top-level name: `ring`, `egress`, `shards` and `encoders` install
under `sglang_tok` (PyPI has a package named `ring`; installing both must break neither)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_installs_only_sglang_tok_at_the_top_level(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(tmp_path), str(ROOT)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    wheel = next(tmp_path.glob("sglang_tok-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert "sglang_tok" in tops
    assert all(t == "sglang_tok" or t.endswith(".dist-info") for t in tops), tops
    for sub in ("ring", "egress", "shards", "encoders", "parsers", "testing", "load"):
        assert f"sglang_tok/{sub}/__init__.py" in names, sub
    assert "sglang_tok/py.typed" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # only the unpacked wheel and the interpreter's own library: no checkout, no editable path
    probe = ("import sys; sys.path[:] = [p for p in sys.path if 'site-packages' in p "
             f"or 'lib/python' in p]; sys.path.insert(0, {str(site)!r});"
             "import sglang_tok.ring.sockets, sglang_tok.egress.router;"
             "import importlib.util as u; print(u.find_spec('ring') is None)")
    r = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"
