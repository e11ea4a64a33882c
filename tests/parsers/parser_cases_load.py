"""Load the peer parser cases in tests/parsers/parser_cases/ (data ported from SGLang's and vLLM's
parser test suites and bug reports; see tests/parsers/parser_cases/README.md for the schema)."""

from __future__ import annotations

import json
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent / "parser_cases"


def all_parsers() -> list[str]:
    """Every case file's name without `.json`: a tool parser name (e.g. `deepseekv32`) or
    `reasoning-<name>` for cases of a reasoning parser alone."""
    return sorted(p.stem for p in CASES_DIR.glob("*.json"))


def load_cases(parser: str) -> list[dict]:
    """The cases of one file, in file order."""
    path = CASES_DIR / f"{parser}.json"
    if not path.is_file():
        raise KeyError(f"no parser cases for {parser!r}; known: {', '.join(all_parsers())}")
    with path.open(encoding="utf-8") as fh:
        cases = json.load(fh)
    if not isinstance(cases, list):
        raise ValueError(f"{path}: expected a JSON list of cases")
    return cases
