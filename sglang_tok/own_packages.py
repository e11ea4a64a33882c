"""The service's top-level packages (`ring`, `egress`, `shards`: the design's process
folders) have names other distributions use too (a function-cache library is `ring` on the
package index). Installed beside one, either overwrites the other's files without a word,
and Python imports whichever came last or sits first on its path. The service and the
plugin look, before importing them, at what Python would import, and stop with one line
naming the other distribution when it is not sglang-tok's own.

Each of the three marks its `__init__.py` with `MARK`; reading the file (not importing it)
keeps another package's import-time side effects out of the check.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import packages_distributions

MARK = 'DISTRIBUTION = "sglang-tok"'
TOPS = ("ring", "egress", "shards")


def _ours(origin: str) -> bool:
    try:
        with open(origin, encoding="utf-8") as f:
            return MARK in f.read()
    except (OSError, UnicodeDecodeError):
        return False


def foreign_package(tops: tuple[str, ...] = TOPS) -> str | None:
    """Why the service cannot start here, in one line: a top-level package Python would
    import that is not sglang-tok's; None when all are."""
    for name in tops:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
        if origin is not None and _ours(origin):
            continue
        if spec is None:
            return (f"sglang-tok cannot start: its `{name}` package is missing "
                    "(reinstall sglang-tok)")
        others = sorted({d for d in packages_distributions().get(name, [])
                         if d.lower().replace("_", "-") != "sglang-tok"})
        who = (f"the distribution {', '.join(repr(d) for d in others)}" if others
               else "another package")
        where = origin or ", ".join(spec.submodule_search_locations or ()) or "?"
        return (f"sglang-tok cannot start: the `{name}` package Python imports ({where}) "
                f"is {who}'s, not sglang-tok's; install sglang-tok in an environment "
                f"without it")
    return None
