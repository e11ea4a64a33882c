#!/usr/bin/env python3
"""List the longest functions (in source lines) of some Python files.

    python scripts/dev/longest_functions.py egress/main.py shards/main.py --top 10

Small functions are a project rule; this keeps the rule measurable.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            out.append((node.end_lineno - node.lineno + 1, f"{path}:{node.lineno} {node.name}"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    found = [f for p in a.files if p.exists() for f in functions(p)]
    for lines, name in sorted(found, reverse=True)[:a.top]:
        print(f"{lines:4d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
