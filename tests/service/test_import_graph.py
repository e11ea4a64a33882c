"""The import graph of what the wheel installs, read from the source (nothing imported):
the serving roof above the service, nothing of the tests, tools or stand-in under it, no
circle, and no arrow that runs back up a floor."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEEL = ("sglang_tok", "ring", "egress", "shards")
OUTSIDE = ("sglang_tok_standin", "sglang_tok_testkit", "sglang_tok_bench")


def _modules() -> dict[str, Path]:
    out = {}
    for top in WHEEL:
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, top_level_only: bool) -> set[str]:
    """The project modules (and outside packages' names) `module` imports."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in nodes:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]) \
                if node.level else (node.module or "")
            base = base.rstrip(".")
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        for name in names:
            while name not in MODULES and "." in name:
                name = name.rsplit(".", 1)[0]
            if name != module:
                out.add(name)
    return out


def _arrows(top_level_only: bool = False) -> dict[str, set[str]]:
    return {m: _imports(m, top_level_only) for m in MODULES}


def test_nothing_of_the_tests_tools_or_stand_in_is_imported_by_the_wheel() -> None:
    bad = {m: sorted(t for t in ts if t.split(".")[0] in OUTSIDE or "harness" in t)
           for m, ts in _arrows().items()}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_no_import_circle() -> None:
    arrows = {m: {t for t in ts if t in MODULES} for m, ts in _arrows(True).items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(arrows[m]):
            assert state.get(t) != 1, f"import circle: {' -> '.join(path[path.index(t):])} -> {t}"
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def _floor_breaks(lower: str, upper: tuple[str, ...]) -> list[str]:
    """Modules under `lower` that import one under any of `upper`."""
    return sorted(f"{m} -> {t}" for m, ts in _arrows().items() if m.startswith(lower)
                  for t in ts if t.startswith(upper) and not t.startswith(lower))


def test_the_serving_roof_is_the_only_part_of_sglang_tok_above_the_processes() -> None:
    """`sglang_tok/` is what the processes share, and its serving roof starts them: no other
    module of it imports egress or shards (the plugin and the kit start the service as a
    program); of the transport, the kit and the encode service use the socket helper."""
    breaks = [b for b in _floor_breaks("sglang_tok", ("egress", "shards"))
              if not b.startswith("sglang_tok.serving")]
    assert not breaks
    ground = [b for b in _floor_breaks("sglang_tok", ("ring",))
              if not b.startswith(("sglang_tok.serving", "sglang_tok.kit",
                                   "sglang_tok.encoders"))]
    assert not ground


def test_the_processes_never_import_the_roof_or_the_kit() -> None:
    for lower in ("ring", "egress", "shards"):
        assert not _floor_breaks(lower, ("sglang_tok.serving", "sglang_tok.kit",
                                         "sglang_tok.integrations"))
    assert not _floor_breaks("ring", ("egress", "shards"))
    assert not _floor_breaks("shards", ("egress",))


def test_the_protocols_model_is_their_floor() -> None:
    """Every protocol translates to the model; the model imports none of them, nor the
    registry that picks one."""
    assert not _floor_breaks("sglang_tok.protocols.model", (
        "sglang_tok.protocols.native", "sglang_tok.protocols.sglang",
        "sglang_tok.protocols.registry"))
    assert not _floor_breaks("sglang_tok.protocols.native", ("sglang_tok.protocols.sglang",
                                                             "sglang_tok.protocols.registry"))
    assert not _floor_breaks("sglang_tok.protocols.sglang", ("sglang_tok.protocols.native",
                                                             "sglang_tok.protocols.registry"))


def test_a_tokenizer_family_imports_only_the_decoding_ground() -> None:
    families = ("shards.byte_level", "shards.byte_fallback", "shards.window")
    for family in families:
        assert not [b for b in _floor_breaks(family, ("shards.",))
                    if not b.split(" -> ")[1].startswith("shards.decoding")], family
    assert not _floor_breaks("shards.decoding", ("shards.",))
