"""Another checkout of the project to measure against, each side importing only its own
code: a folder with its own venv, or a git revision made into one (a git worktree of it
with a venv of its own, the project installed editable into it, as

    git worktree add --detach /tmp/before REV && python3 -m venv /tmp/before/.venv \\
        && /tmp/before/.venv/bin/pip install -q -e /tmp/before

does by hand). A revision's checkout is kept for the next run (`$TMPDIR/sglang-tok-SHA`;
`git worktree remove` drops it); its measures run in a process of its python.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

READY = "sglang-tok-ready"  # in the venv, once the project is installed into it


@dataclass(frozen=True)
class Checkout:
    root: Path  # its working tree
    python: Path  # a python that imports this tree's packages


def resolve(other: str, repo: Path, python: str | None = None) -> Checkout:
    """`other` as a checkout: a folder is one (its python: `python`, else its .venv's); else
    a git revision of the repository at `repo`, made into a worktree with a venv."""
    path = Path(other)
    if path.is_dir():
        return Checkout(path.resolve(), Path(python) if python else path / ".venv" / "bin" /
                        "python")
    return worktree(other, repo)


def worktree(rev: str, repo: Path) -> Checkout:
    """The worktree of `rev` with its venv, made (a minute or two: pip installs the project
    and its dependencies) unless an earlier run made it."""
    found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                            f"{rev}^{{commit}}"], capture_output=True, text=True)
    if found.returncode:
        raise SystemExit(f"{rev!r} is neither a folder nor a git revision of {repo}")
    sha = found.stdout.strip()
    root = Path(tempfile.gettempdir()) / f"sglang-tok-{sha[:12]}"
    venv = root / ".venv"
    out = Checkout(root, venv / "bin" / "python")
    if (venv / READY).exists():
        return out
    print(f"making a checkout of {rev} ({sha[:12]}) at {root} with its own venv",
          file=sys.stderr, flush=True)
    if not (root / ".git").exists():
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(root), sha],
                       check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    extra = [arg for folder in ("standin", "dev") if (root / folder / "pyproject.toml").exists()
             for arg in ("-e", str(root / folder))]  # the stand-in and dev packages beside it
    subprocess.run([str(out.python), "-m", "pip", "install", "-q", "-e", str(root), *extra],
                   check=True)
    (venv / READY).touch()
    return out
