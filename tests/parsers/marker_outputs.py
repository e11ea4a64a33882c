"""The generated outputs and the tokenizer of the kimi_k2, gpt-oss (harmony), llama3_json
and pythonic property tests, shared by `test_parsers_kimi_llama_harmony` and
`test_parsed_rows` from here, so that no test module imports another.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st
from parser_outputs import arguments, names, words

from sglang_tok.tokenizer import TokenizerInfo
from sglang_tok_testkit import zoo
from shards.byte_level.table import byte_level_table

KIMI = ["<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>", "<|tool_call_end|>"]


HARMONY = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
           "<|constrain|>"]


LLAMA = ["<|python_tag|>", "<|python_start|>", "<|python_end|>", "<|eot_id|>"]


SPECIALS = ["<think>", "</think>", *KIMI, *HARMONY, *LLAMA]


def marker_tokenizer() -> TokenizerInfo:
    info = zoo.with_markers(tuple(SPECIALS), "markers-as-specials")
    assert byte_level_table(info) is not None
    return info


def write_call(fmt: str, name: str, args: dict[str, Any], i: int, variant: int) -> str:
    dumps = json.dumps(args, ensure_ascii=bool(variant % 2))
    if fmt == "kimi_k2":
        return (f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{dumps}"
                "<|tool_call_end|>")
    if fmt == "gpt-oss":
        to = f"to=functions.{name}"
        if variant % 2:
            return f"<|start|>assistant {to}<|channel|>commentary json<|message|>{dumps}<|call|>"
        return (f"<|start|>assistant<|channel|>commentary {to} <|constrain|>json<|message|>"
                f"{dumps}<|call|>")
    if fmt == "llama3_json":
        key = "parameters" if variant % 2 else "arguments"
        return json.dumps({"name": name, key: args}, ensure_ascii=bool(variant % 2))
    assert fmt == "pythonic"
    if variant % 2:  # Python comments between the arguments and after the call (issue 18)
        return (f"{name}( # {name}'s (\n" + ", # ] ' #\n".join(f"{k}={v!r}" for k, v in args.items())
                + ") # done ]\n")
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


py_names = st.sampled_from(["get_weather", "search", "run_code", "f"])


py_args = st.dictionaries(st.sampled_from(["city", "query", "code", "n"]), st.recursive(
    st.one_of(words(), st.integers(-10**6, 10**6), st.booleans(), st.none()),
    lambda inner: st.lists(inner, max_size=3), max_leaves=5), max_size=3)


@st.composite
def outputs(draw: st.DrawFn, fmt: str, wellformed: bool) -> tuple[str, str, str, list[Any]]:
    """(output text, expected reasoning, expected content, expected calls)."""
    reasoning = draw(st.one_of(st.just(""), words()))
    content = draw(st.one_of(st.just(""), words()))
    pythonic = fmt == "pythonic"
    calls = draw(st.lists(st.tuples(py_names if pythonic else names,
                                    py_args if pythonic else arguments, st.integers(0, 1)),
                          max_size=3))
    bodies = [write_call(fmt, n, a, i, v) for i, (n, a, v) in enumerate(calls)]
    if fmt == "gpt-oss":
        out = (f"<|channel|>analysis<|message|>{reasoning}<|end|>" if reasoning else "")
        out += f"<|start|>assistant<|channel|>final<|message|>{content}<|end|>" if content else ""
        out += "".join(bodies)
    else:
        out = f"<think>{reasoning}</think>" if reasoning and fmt == "kimi_k2" else ""
        if fmt != "kimi_k2":
            reasoning = ""
        if fmt == "llama3_json" and calls:
            content = content.rstrip()
            out += content + ("<|python_tag|>" if content else "") + "; ".join(bodies)
        else:
            out += content
            if calls and fmt == "kimi_k2":
                out += KIMI[0] + "".join(bodies) + KIMI[1]
            elif calls:
                out += "[" + ", ".join(bodies) + "]"
    if not wellformed:
        junk = st.sampled_from(["<|tool_call_begin|>{bad", "</think>", "<think>", "<|end|>",
                                "<|channel|>", "[f(", '{"x": }', "<|eot_id|>", ";", "z",
                                "<|python_tag|>"])
        for _ in range(draw(st.integers(0, 3))):
            at = draw(st.integers(0, len(out)))
            out = out[:at] + draw(junk) + out[at:]
    expected = [(n, a, f"functions.{n}:{i}" if fmt == "kimi_k2" else None)
                for i, (n, a, _) in enumerate(calls)]
    return out, reasoning, content, expected
