"""The request's tool definitions, as the parsers need them: names, and parameter types.

XML-style formats (qwen3_coder, and later glm45, minimax_m2, ...) carry every value as
text; whether `3` means the number or the string comes only from the request's JSON
schema. This module is the one place that decision is made, so every such parser
converts the same way (and a stream converts exactly as a batch parse does).

Conversion (peers differ in details; ours, each choice for a reason):
- no schema for the parameter (no `tools`, an unknown tool or parameter, no `type`), or a
  type that allows string: the text is kept as a string. A string value is streamed as it
  is generated, so it can never be reinterpreted later (SGLang maps the text `null` to
  null even for string parameters; we cannot without holding every string back).
- otherwise the text (surrounding whitespace ignored) is parsed as JSON and kept if it
  has one of the allowed types (`integer`: an int; `number`: int or float; `boolean`,
  `object`, `array`, `null`); `True`/`False` written Python-style count as booleans
  (models write them; SGLang accepts any case too). A value that does not convert stays
  a string: never an error, the client sees what the model wrote.
"""

from __future__ import annotations

import re
from typing import Any

from .jsonio import dumps, loads

# tool name -> parameter name -> allowed JSON-schema types ([] means: keep as string)
Schemas = dict[str, dict[str, tuple[str, ...]]]

_STRINGY = frozenset({"string", "str", "text", "enum", "char", "varchar"})


def tool_schemas(tools: list[Any]) -> Schemas:
    """OpenAI tool definitions -> Schemas; entries that are not function tools are ignored."""
    out: Schemas = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, dict) else None
        types: dict[str, tuple[str, ...]] = {}
        if isinstance(props, dict):
            for pname, spec in props.items():
                types[str(pname)] = _types_of(spec)
        out[fn["name"]] = types
    return out


def _types_of(spec: Any) -> tuple[str, ...]:
    names = [n.strip().lower() for n in _type_names(spec, 0)]
    if not names:
        return ()
    if any(n in _STRINGY for n in names):
        return ()
    return tuple(names)


def _type_names(spec: Any, depth: int) -> list[str]:
    """`type` (a name or a list), or the union of `anyOf` / `oneOf` alternatives (nested,
    as pydantic writes Optional[list]: SGLang test_function_call_parser.py
    TestQwen3CoderDetector::test_*anyof*)."""
    if not isinstance(spec, dict) or depth > 8:
        return []
    t = spec.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    out: list[str] = []
    for key in ("anyOf", "oneOf"):
        alts = spec.get(key)
        if isinstance(alts, list):
            for alt in alts:
                out += [n for n in _type_names(alt, depth + 1) if n not in out]
    return out


def param_types(schemas: Schemas | None, tool: str, param: str) -> tuple[str, ...]:
    """The allowed types of a parameter; () when its values are strings."""
    if schemas is None:
        return ()
    return schemas.get(tool, {}).get(param, ())


def _accepts(types: tuple[str, ...], value: Any) -> bool:
    for t in types:
        if value is None:
            if t == "null":
                return True
        elif isinstance(value, bool):
            if t in ("boolean", "bool"):
                return True
        elif isinstance(value, int):
            if t in ("integer", "number") or t.startswith("int") or t.startswith("num"):
                return True
        elif isinstance(value, float):
            if t in ("number", "float") or t.startswith("num"):
                return True
        elif isinstance(value, dict):
            if t in ("object", "dict"):
                return True
        elif isinstance(value, list) and t in ("array", "list"):
            return True
    return False


_INT = re.compile(r"0|-?[1-9][0-9]{0,17}")


def convert(text: str, types: tuple[str, ...]) -> str:
    """A parameter's text as the JSON text of its value (`ensure_ascii` off)."""
    if types:
        s = text.strip()
        if _INT.fullmatch(s) is not None and _accepts(types, 1):
            return s  # a canonical int is its own JSON (what loads and dumps give)
        if s in ("True", "False"):
            s = s.lower()
        try:
            value = loads(s)
        except (ValueError, RecursionError):
            pass
        else:
            if _accepts(types, value):
                return dumps(value)
    return dumps(text)
