"""The service's top-level names (`ring`, `egress`, `shards`) are other distributions' too:
where Python would import another's, `sglang-tok serve` and the plugin stop at start with
one line naming it, before anything of it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sglang_tok.own_packages import foreign_package


def _foreign_ring(site: Path) -> None:
    """A folder as pip leaves one with the function-cache library `ring` installed."""
    (site / "ring").mkdir(parents=True)
    (site / "ring" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    info = site / "ring-0.10.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ring\nVersion: 0.10.1\n")
    (info / "top_level.txt").write_text("ring\n")
    (info / "RECORD").write_text("ring/__init__.py,,\n")


def _run(code: list[str], site: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *code], env=env, cwd=tmp, capture_output=True,
                          text=True, timeout=60)


def test_this_checkouts_packages_are_its_own() -> None:
    assert foreign_package() is None


def test_serve_stops_in_one_line_naming_the_other_distribution(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _foreign_ring(site)
    r = _run(["-m", "sglang_tok.serving.cli", "serve", "--shards", "1", "--runtime-dir",
              str(tmp_path / "run")], site, tmp_path)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "the `ring` package Python imports" in lines[0] and "'ring'" in lines[0], lines[0]
    assert "imported" not in r.stderr  # read, never imported
    assert not (tmp_path / "run").exists()


def test_the_plugin_stops_in_one_line_before_reading_sglang(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _foreign_ring(site)
    code = ("from sglang_tok.integrations.sglang.plugin import launch_detokenizer\n"
            "launch_detokenizer(None, None, None, None)\n")
    r = _run(["-c", code], site, tmp_path)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1].startswith("sglang_tok: sglang-tok cannot start:"), \
        r.stderr
    assert "'ring'" in r.stderr


def test_a_package_without_a_distribution_is_named_by_its_path(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "shards").mkdir(parents=True)
    (site / "shards" / "__init__.py").write_text("")
    r = _run(["-c", "from sglang_tok.own_packages import foreign_package; "
              "print(foreign_package())"], site, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the `shards` package Python imports" in r.stdout
    assert str(site / "shards") in r.stdout and "another package" in r.stdout
