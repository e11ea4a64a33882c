"""Llama's tool-call formats: `llama3_json` (Llama 3.1-3.3) and `pythonic` (Llama 4).

llama3_json: `{"name": ..., "parameters": {...}}` objects (`arguments` is read too), each
opened by `<|python_tag|>`, or with no opener at all at the start of the output or after
a call and a `;` separator (`{...}; {...}`). A call ends where its JSON object ends (there
is no end marker); text after it is content. The object is read as hermes' is
(`json_calls.HermesReader`): the model's own arguments JSON passes through.

pythonic: a Python list of calls, `[f(a=1, b="x"), g()]`, optionally inside
`<|python_start|>` ... `<|python_end|>` (markup, dropped around delivered calls). Any `[`
in the content may open one: it is a call list only if an identifier and `(` follow, and
the list ends at its closing `]` (brackets counted outside Python strings). Each call is
parsed by Python's `ast` once its `)` arrives; keyword arguments only, values Python
literals (`ast.literal_eval`), converted to JSON as `json.dumps` writes them
(`ensure_ascii` off; tuples become arrays). Anything else (positional arguments, names,
sets, bytes, NaN) makes the list malformed, so it is text. A call's arguments leave when
its `)` arrives, its closing brace when the next call starts or the list ends; both modes
give the same bytes.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from .json_calls import HermesReader, parse_hermes
from .schema import Schemas
from .tools import Calls, Event, JsonEnd, ToolFormat

PYTHON_TAG = "<|python_tag|>"
PY_SECTION = ("<|python_start|>", "<|python_end|>")


# ------------------------------------------------------------------ llama3_json
class ObjectEnd:
    """The call is one JSON object; it ends where the object ends. A body whose first
    non-blank character is not `{` ends (malformed) at that character."""

    __slots__ = ("json",)

    def __init__(self) -> None:
        self.json: JsonEnd | None = None

    def end(self, body: str) -> tuple[int, int]:
        if self.json is None:
            t = body.lstrip()
            if not t:
                return -1, -1
            start = len(body) - len(t)
            if t[0] != "{":
                return start, start
            self.json = JsonEnd(start)
        at = self.json.end(body)
        return at, at


def llama3_json() -> ToolFormat:
    return ToolFormat("llama3_json", PYTHON_TAG, ObjectEnd, parse_hermes, HermesReader,
                      bare="{", chain=";")


# ------------------------------------------------------------------ pythonic
_HEAD = re.compile(r"\s*([A-Za-z_][\w.]*)\s*\(")
_HEAD_PREFIX = re.compile(r"\s*(?:[A-Za-z_][\w.]*\s*)?")
_PY_STRUCT = re.compile(r"[\[\](){}'\"\\]")
_OPENERS = "([{"


class PyScan:
    """Resumable bracket depth of Python source, outside string literals."""

    __slots__ = ("depth", "pos", "quote")

    def __init__(self, pos: int, depth: int) -> None:
        self.pos = pos
        self.depth = depth
        self.quote = ""

    def close(self, text: str, n: int) -> int:
        """Index of the closer that brings the depth to 0 in text[pos:n], or -1."""
        i = self.pos
        while True:
            m = _PY_STRUCT.search(text, i, n)
            if m is None:
                self.pos = n
                return -1
            j = m.start()
            c = text[j]
            if c == "\\":
                if j + 1 >= n:
                    self.pos = j  # the escaped character has not arrived yet
                    return -1
                i = j + 2
                continue
            if self.quote:
                if c == self.quote:
                    self.quote = ""
            elif c in "'\"":
                self.quote = c
            elif c in _OPENERS:
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    self.pos = j + 1
                    return j
            i = j + 1


class ListEnd:
    """The call list (after `[`) ends at its closing `]`; it must start `name(`, else it
    ends (malformed) at the first character that rules that out."""

    __slots__ = ("scan",)

    def __init__(self) -> None:
        self.scan: PyScan | None = None

    def end(self, body: str) -> tuple[int, int]:
        if self.scan is None:
            m = _HEAD.match(body)
            if m is None:
                e = _HEAD_PREFIX.match(body).end()  # type: ignore[union-attr]
                return (-1, -1) if e == len(body) else (e, e)
            self.scan = PyScan(m.end(), 2)  # inside the list and the first call
        at = self.scan.close(body, len(body))
        return (-1, -1) if at < 0 else (at, at + 1)


def _func_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _func_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _call_json(node: ast.expr) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _func_name(node.func)
    if name is None:
        return None
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            return None  # **kwargs
        args[kw.arg] = ast.literal_eval(kw.value)
    return name, json.dumps(args, ensure_ascii=False, allow_nan=False)


def _parse(source: str) -> ast.expr | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes such as "\d" still parse
            return ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def parse_call(source: str) -> tuple[str, str] | None:
    """One `name(k=v, ...)` -> (name, arguments JSON), or None."""
    node = _parse(source)
    try:
        return None if node is None else _call_json(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def parse_pythonic(body: str) -> Calls | None:
    """The list's inside (without its brackets) -> calls, or None."""
    node = _parse("[" + body + "]")
    if not isinstance(node, ast.List) or not node.elts:
        return None
    calls: Calls = []
    for elt in node.elts:
        try:
            call = _call_json(elt)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        if call is None:
            return None
        calls.append(call)
    return calls


HEAD, ARGS, AFTER, BAD = range(4)


class PythonicReader:
    """Call by call: the name at `name(`, the arguments when its `)` arrives."""

    __slots__ = ("held", "pos", "scan", "start", "state")

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.state = HEAD
        self.pos = 0
        self.start = 0
        self.scan: PyScan | None = None
        self.held = ""  # the last call's closing brace

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        pos = self.pos
        while pos < ready:
            st = self.state
            if st == HEAD:
                m = _HEAD.match(body, pos, ready)
                if m is None:
                    e = _HEAD_PREFIX.match(body, pos, ready).end()  # type: ignore[union-attr]
                    if e < ready:
                        self.state = BAD
                    break
                if self.held:
                    out.append((None, self.held))
                    self.held = ""
                out.append((m.group(1), ""))
                self.start = pos
                self.scan = PyScan(m.end(), 1)
                pos = m.end()
                self.state = ARGS
            elif st == ARGS:
                assert self.scan is not None
                at = self.scan.close(body, ready)
                if at < 0:
                    pos = self.scan.pos
                    break
                pos = at + 1
                call = parse_call(body[self.start:pos].strip())
                if call is None:
                    self.state = BAD
                    break
                out.append((None, call[1][:-1]))
                self.held = "}"
                self.state = AFTER
            elif st == AFTER:
                t = body[pos:ready].lstrip()
                if not t:
                    pos = ready
                    break
                if t[0] != ",":
                    self.state = BAD
                    break
                pos = ready - len(t) + 1
                self.state = HEAD
            else:
                break
        self.pos = pos
        return out

    def close(self, body: str) -> list[Event] | None:
        if self.state != AFTER or parse_pythonic(body) is None:
            return None
        return [(None, self.held)]


def pythonic() -> ToolFormat:
    return ToolFormat("pythonic", "[", ListEnd, parse_pythonic, PythonicReader, PY_SECTION,
                      outside=True)
