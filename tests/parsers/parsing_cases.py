"""The outputs, tokenizers and batch reference of the parsing wire tests, which the
service-level ones (`test_parsing_service`) hold the running service to as well.
"""

from __future__ import annotations

from typing import Any

from decoding import decoding

from sglang_tok.parsers import ParsedDelta, make_parsed_stream, marker_token_ids
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_testkit import zoo

DS: TokenizerInfo = load("deepseek-v4")
QWEN_SPECIALS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>"]

DS_OUTPUT = (
    "<think>\n先想一想: the user wants 東京 weather 🌤️.\n</think>\n\nChecking now.\n\n"
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">東京 🙂</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"run\">\n"
    "{\"code\": \"def f(x):\\n    return x  # 值\"}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
QWEN_OUTPUT = ("<think>plan: call f</think>Sure.<tool_call>\n"
               "{\"name\": \"f\", \"arguments\": {\"q\": \"日本語 👍🏽\"}}\n</tool_call><|im_end|>")


def qwen_style() -> TokenizerInfo:
    """Byte-level BPE whose reasoning and tool markers are special added tokens (as Qwen3's)."""
    return zoo.with_markers(tuple(QWEN_SPECIALS), "qwen-style")


def enc(info: TokenizerInfo, s: str) -> list[int]:
    return info.tokenizer.encode(s, add_special_tokens=False).ids


def reference(info: TokenizerInfo, opts: Open, ids: list[int]) -> ParsedDelta:
    """parse_full of the whole decode (markers kept as the shard keeps them)."""
    ps = make_parsed_stream(opts.reasoning_parser, opts.reasoning_started, opts.tool_parser,
                            opts.stop, opts.include_stop_str_in_output, opts.min_tokens)
    keep = marker_token_ids(info, ps.markers) if opts.skip_special_tokens else frozenset()
    push, flush = decoding(info, opts.skip_special_tokens, opts.prompt_ids, keep)
    head = push(ids[:opts.min_tokens]) if opts.min_tokens else ""
    full = head + push(ids[opts.min_tokens:]) + flush()
    if opts.min_tokens > len(ids):  # never reached: all exempt, finish's release included
        return ps.parse_full(full, len(full), min_tokens_reached=False)
    return ps.parse_full(full, len(head) if opts.min_tokens else 0)


def channels(deltas: list[Delta]) -> tuple[str, str, list[tuple[int, str | None, str]], bool]:
    calls: dict[int, list[Any]] = {}
    for d in deltas:
        for c in d.tool_calls or ():
            have = calls.setdefault(c.index, [c.index, None, ""])
            have[1] = c.name if c.name is not None else have[1]
            have[2] += c.arguments
    return ("".join(d.text for d in deltas), "".join(d.reasoning for d in deltas),
            [tuple(calls[i]) for i in sorted(calls)],  # type: ignore[misc]
            deltas[-1].finish is not None and deltas[-1].finish.tool_calls is True)


def ref_channels(pd: ParsedDelta) -> tuple[str, str, list[tuple[int, str | None, str]], bool]:
    return (pd.text, pd.reasoning, [(c.index, c.name, c.arguments) for c in pd.tool_calls or ()],
            pd.ended_with_tool_calls)
