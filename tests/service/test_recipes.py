"""The recipes of docs/recipes.md work as written: every shell block that needs neither
SGLang nor a long wait (a block whose first line starts `# needs` is left out) runs from
the checkout's root with this environment's python first on PATH, and succeeds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "docs" / "recipes.md"
BLOCK = re.compile(r"^ *```sh\n(.*?)^ *```", re.S | re.M)


def _commands() -> list[str]:
    out = []
    for block in BLOCK.findall(RECIPES.read_text()):
        lines = [line.strip() for line in block.strip().splitlines()]
        if lines and not lines[0].startswith("# needs"):
            out += [line for line in lines if line and not line.startswith("#")]
    return out


COMMANDS = _commands()


def test_the_recipes_show_what_the_test_runs_and_what_it_leaves_out() -> None:
    text = RECIPES.read_text()
    assert "## Support a new SGLang release" in text and "## Add a tokenizer family" in text
    assert len(COMMANDS) >= 4, COMMANDS
    assert "# needs SGLang" in text  # the steps that need SGLang are shown, not run here


@pytest.mark.parametrize("command", COMMANDS)
def test_a_recipe_command_runs(command: str) -> None:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")])}
    r = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, f"{command}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
