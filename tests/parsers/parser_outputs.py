"""The generated model outputs and test tokenizers the parser property tests share.

`test_parsers` checks stream == batch on them, and `test_parsers_kimi_llama_harmony`,
`test_parser_cases_glm` and `test_parsed_rows` draw on the same outputs, argument values
and checks; they live here, not in a test module, so that no test module imports another.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from decoding import byte_decoding
from hypothesis import strategies as st
from strategies import PIECES

from sglang_tok.kit.tool_calls import glm_call, minimax_invoke, qwen3_coder_call
from sglang_tok.parsers import ParsedDelta, ParsedStream
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_testkit import zoo
from shards.byte_level.table import byte_level_table

QWEN_SPECIALS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]"]


def qwen_style() -> TokenizerInfo:
    """Byte-level BPE whose reasoning and tool markers are special added tokens (as Qwen3's)."""
    info = zoo.with_markers(tuple(QWEN_SPECIALS), "qwen-style")
    assert byte_level_table(info) is not None
    return info


GLM_SPECIALS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                "<arg_value>", "</arg_value>"]


MINIMAX_SPECIALS = ["<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"]


def styled(specials: tuple[str, ...], name: str) -> TokenizerInfo:
    """GLM-4.5/4.7 and MiniMax-M2 ship their markers as special tokens (`<invoke`,
    `<parameter` are ordinary text in MiniMax's)."""
    return zoo.with_markers(specials, name)


def glm_style() -> TokenizerInfo:
    return styled(tuple(GLM_SPECIALS), "glm-style")


def minimax_style() -> TokenizerInfo:
    return styled(tuple(MINIMAX_SPECIALS), "minimax-style")


@functools.cache
def deepseek() -> TokenizerInfo:
    return load("deepseek-v4")


def stream_of(delta: ParsedDelta) -> tuple[str, str, list[tuple[int, str | None, str, bool]],
                                           Any]:
    calls = [(c.index, c.name, c.arguments, c.cut) for c in delta.tool_calls or ()]
    return delta.text, delta.reasoning, calls, (delta.stop, delta.ended_with_tool_calls)


def split_text(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    out, last = [], 0
    for p in points + [len(text)]:
        out.append(text[last:p])
        last = p
    return out


def check_call_deltas(deltas: list[ParsedDelta], mode: str) -> None:
    """The shape of the call deltas: a call opens once (name, ""), fragments follow, flags
    come last, nothing after; whole mode sends each call in one entry."""
    seen: dict[int, str] = {}
    for c in (c for d in deltas for c in d.tool_calls or ()):
        state = seen.get(c.index)
        if mode == "whole":
            assert state is None and c.name is not None and not (c.malformed or c.cut)
            seen[c.index] = "done"
        elif c.name is not None:
            assert state is None and c.arguments == "" and not (c.malformed or c.cut)
            seen[c.index] = "open"
        else:
            assert state == "open", (c, state)
            if c.malformed or c.cut:
                seen[c.index] = "done"
    assert list(seen) == sorted(seen)


def words() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join)


CODE = ['print("héllo")\n', "if a < b and c > d:\n\treturn {'k': [1]}\n", "s = '\\\\n' + \"\\\"\"",
        "<div class=\"x\">&amp;</div>", "SELECT * FROM t WHERE a = '日本';"]


values = st.recursive(
    st.one_of(words(), st.sampled_from(CODE), st.integers(-10**6, 10**6), st.booleans(),
              st.none(), st.floats(allow_nan=False, allow_infinity=False, width=32)),
    lambda inner: st.lists(inner, max_size=3), max_leaves=5)


arguments = st.dictionaries(st.sampled_from(["city", "query", "code", "n", "items", "日付"]),
                            values, max_size=3)


names = st.sampled_from(["get_weather", "search", "run_code", "f", "lookup.v2"])


def as_parsed(fmt: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments a format gives back for `args` written by `write_call`: minimax_m2
    strips the newlines around a value."""
    if fmt != "minimax_m2":
        return args
    return {k: v.strip("\n") if isinstance(v, str) else v for k, v in args.items()}


def write_call(fmt: str, name: str, args: dict[str, Any], variant: int) -> str:
    dumps = json.dumps(args, ensure_ascii=bool(variant % 2))
    if fmt == "qwen3_coder":
        return qwen3_coder_call(name, args)
    if fmt in ("glm45", "glm47"):
        return glm_call(fmt, name, args)
    if fmt == "minimax_m2":
        return minimax_invoke(name, args)
    if fmt == "hermes":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args},
                                            ensure_ascii=bool(variant % 2)) + "\n</tool_call>"
    if fmt == "mistral":
        if variant % 2:
            return f"[TOOL_CALLS]{name}[ARGS]{dumps}"
        return "[TOOL_CALLS] " + json.dumps([{"name": name, "arguments": args}])
    if fmt == "deepseekv3":
        if variant % 2:
            return f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{dumps}<｜tool▁call▁end｜>"
        return (f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{dumps}\n```"
                "<｜tool▁call▁end｜>")
    assert fmt == "deepseekv4"
    if variant % 2:
        return f'<｜DSML｜invoke name="{name}">\n{dumps}\n</｜DSML｜invoke>'
    params = "".join(
        f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n' if isinstance(v, str)
        else f'<｜DSML｜parameter name="{k}" string="false">{json.dumps(v)}</｜DSML｜parameter>\n'
        for k, v in args.items())
    return f'<｜DSML｜invoke name="{name}">\n{params}</｜DSML｜invoke>'


SECTIONS = {"deepseekv3": ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
            "deepseekv4": ("<｜DSML｜tool_calls>\n", "\n</｜DSML｜tool_calls>"),
            "minimax_m2": ("<minimax:tool_call>\n", "\n</minimax:tool_call>")}


@st.composite
def outputs(draw: st.DrawFn, fmt: str, started: bool,
            wellformed: bool) -> tuple[str, str, str, list[tuple[str, str]]]:
    """(output text, expected reasoning, expected content, expected calls)."""
    reasoning = draw(st.one_of(st.just(""), words()))
    content = draw(st.one_of(st.just(""), words()))
    calls = draw(st.lists(st.tuples(names, arguments, st.integers(0, 1)), max_size=3))
    out = ""
    if reasoning or started:
        out = ("" if started else "<think>") + reasoning + "</think>"
    out += content
    body = "\n".join(write_call(fmt, n, a, v) for n, a, v in calls)
    if calls and fmt == "hermes" and draw(st.booleans()):  # one `<tool_call>` with an array
        body = "<tool_call>\n" + json.dumps(
            [{"name": n, "arguments": a} for n, a, _ in calls],
            ensure_ascii=bool(calls[0][2])) + "\n</tool_call>"
    if calls and fmt in SECTIONS:
        body = SECTIONS[fmt][0] + body + SECTIONS[fmt][1]
    out += body
    if not wellformed:
        junk = st.sampled_from(["<tool_call>{bad", "</think>", "<think>", "[TOOL_CALLS] no",
                                ', {"name": "b", "arguments": {bad}', ', "junk"', "]",
                                "<｜DSML｜tool_calls>\n<｜DSML｜invoke", '{"x": }', "<|im_end|>",
                                "<｜end▁of▁sentence｜>", "z"])
        for _ in range(draw(st.integers(0, 3))):
            at = draw(st.integers(0, len(out)))
            out = out[:at] + draw(junk) + out[at:]
    expected = [(n, json.dumps(as_parsed(fmt, a), ensure_ascii=False)) for n, a, _ in calls]
    return out, reasoning, content, expected


def decode_rows(info: TokenizerInfo, ids: list[int], rows: list[list[int]],
                table: list[bytes], p: ParsedStream, min_tokens: int) -> list[ParsedDelta]:
    """What the shard will do: push each row, feed its text; split the min_tokens row."""
    push, flush = byte_decoding(table)
    out, seen = [], 0
    for row in rows:
        if seen < min_tokens <= seen + len(row):
            k = min_tokens - seen
            out.append(p.feed(push(row[:k])))
            p.exempt_end()
            out.append(p.feed(push(row[k:])))
        else:
            out.append(p.feed(push(row)))
        seen += len(row)
    out.append(p.feed(flush()))
    out.append(p.finish())
    return out


JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number",
              type(None): "null", list: "array", dict: "object"}


XML_PARAMS = {"glm45": re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S),
              "glm47": re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S),
              "minimax_m2": re.compile(r'<parameter name="(.*?)">(.*?)</parameter>', re.S)}


TYPED = ("qwen3_coder", *XML_PARAMS)


def written_params(fmt: str, text: str) -> list[tuple[str, str]]:
    if fmt in XML_PARAMS:
        return XML_PARAMS[fmt].findall(text)
    out = []
    for call in text.split("<function=")[1:]:
        for part in call.split("<parameter=")[1:]:
            key, _, value = part.partition(">\n")
            out.append((key, value.split("\n</parameter>")[0]))
    return out


def schema_of(text: str, fmt: str = "qwen3_coder") -> list[dict[str, Any]] | None:
    """Tools whose parameter types are those of the values written (the schema-typed
    formats), or None when one key is written with two types (then only stream == batch
    is checked)."""
    types: dict[str, str] = {}
    for key, value in written_params(fmt, text):
        try:
            t = JSON_TYPES[type(json.loads(value))]
        except ValueError:
            t = "string"
        if types.setdefault(key, t) != t:
            return None
    props = {k: {"type": t} for k, t in types.items()}
    return [{"type": "function", "function": {"name": n, "parameters": {"properties": props}}}
            for n in ["get_weather", "search", "run_code", "f", "lookup.v2"]]
