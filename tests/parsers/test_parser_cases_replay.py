"""Replay of the ported SGLang parser cases (tests/parsers/parser_cases/) through our parsers.

Each case's text is encoded with a real tokenizer of its family (the built-in DeepSeek-V4
one for the DeepSeek formats; for the others a byte-level BPE built here with the
format's markers as special added tokens, as Qwen's and Mistral's tokenizers have them),
then decoded by a shard's `ParsedRequest` in rows of 1-4 ids, exactly as the service
runs it. Two checks per case:
- the streamed result equals `parse_full` of the decoded text (our own rule: stream ==
  batch), always;
- it agrees with the peer's expectation (`expect`), unless the case is listed in
  `EXPECTED_DIFFERENCES` with the reason we differ on purpose (and then it must differ,
  so the list stays honest).

Adding a parser's case file is one entry in `FILES` (and its tokenizer's specials, if it
is not a DeepSeek format). `python tests/parsers/test_parser_cases_replay.py` prints agree/total
per file.
"""

from __future__ import annotations

import functools
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from parser_cases_load import load_cases

from sglang_tok.finish import Length
from sglang_tok.parsers import ParsedDelta, ToolCallDelta, make_parsed_stream
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_testkit import zoo
from shards.messages.request import make_request, refusal

# case file -> the tokenizer its text is encoded with ("deepseek-v4" or a list of specials)
QWEN_SPECIALS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
MISTRAL_SPECIALS = ("[TOOL_CALLS]", "[ARGS]")
FILES: dict[str, str | tuple[str, ...]] = {
    "deepseekv4": "deepseek-v4",
    "deepseekv32": "deepseek-v4",
    "deepseekv3": "deepseek-v4",
    "hermes": QWEN_SPECIALS,
    "mistral": MISTRAL_SPECIALS,
    "qwen3_coder": QWEN_SPECIALS,
    "reasoning-deepseek-r1": "deepseek-v4",
    "reasoning-deepseek-v4": "deepseek-v4",
    "reasoning-qwen3": QWEN_SPECIALS,
}

# case id (without the "sglang-" prefix) -> why our result differs from the peer's, on purpose
STRIPPED = ("the peer's one-shot parse strips the content before a call (`text[:idx].strip()`, "
            "its streaming does not); we keep content byte for byte")
CHUNK_DEPENDENT = ("the peer's result depends on how the text is chunked (its test says so: "
                   "'accepted divergence'); ours does not (stream == batch), and this "
                   "expectation is one chunking's")
EXPECTED_DIFFERENCES: dict[str, str] = {
    "test_deepseekv4_detector-TestDeepSeekV4Streaming-"
    "test_parse_error_neither_swallows_nor_duplicates":
        "the peer test injects a parser exception (a mock) to check its recovery; the text "
        "itself is a well-formed call, which we deliver",
    "test_function_call_parser-TestDeepSeekV32Detector-test_detect_and_parse_no_parameters":
        STRIPPED,
    "test_function_call_parser-TestQwen25Detector-test_detect_and_parse_with_normal_text_prefix":
        STRIPPED,
    "test_hermes_detector-TestHermesDetector-test_tool_call_with_leading_text": STRIPPED,
    "test_function_call_parser-TestMistralDetector-test_detect_and_parse_with_text_before_tool_call":
        STRIPPED,
    "test_mistral_detector-TestMistralDetector-test_compact_format_with_leading_text": STRIPPED,
    "test_mistral_detector-TestMistralDetector-test_json_array_with_leading_text": STRIPPED,
    "test_mistral_detector-TestMistralDetector-test_json_array_with_invalid_json":
        "the peer drops a malformed call silently; we give it back as text "
        "(protocol.md section 8, rule 4)",
    **{f"test_reasoning_parser-TestStreamingChunkSizeInvariance-{t}": CHUNK_DEPENDENT for t in (
        "test_dsv4_reasoning_quoting_dsml_is_chunk_dependent-1",
        "test_dsv4_reasoning_quoting_dsml_is_chunk_dependent-2",
        "test_dsv4_reasoning_quoting_dsml_is_chunk_dependent-3",
        "test_text_before_think_token_is_chunk_dependent-1",
        "test_text_before_think_token_is_chunk_dependent-2",
        "test_text_before_think_token_is_chunk_dependent-4",
        "test_text_before_think_token_is_chunk_dependent-5")},
}


@functools.cache
def tokenizer(kind: str | tuple[str, ...]) -> TokenizerInfo:
    if isinstance(kind, str):
        return load(kind)
    return zoo.with_markers(kind)


def rows_of(ids: list[int], seed: int) -> list[list[int]]:
    """Rows of 1-4 ids, the same for a case on every run."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(ids):
        n = rng.randint(1, 4)
        out.append(ids[i:i + n])
        i += n
    return out or [[]]


def opts_of(case: dict[str, Any]) -> Open:
    return Open("r", reasoning_parser=case.get("reasoning_parser", ""),
                reasoning_started=case.get("reasoning_started", False),
                tool_parser=case.get("tool_parser", ""), tools=case.get("tools") or [])


def replay(case: dict[str, Any], kind: str | tuple[str, ...],
           seed: int) -> tuple[ParsedDelta, ParsedDelta, str]:
    """(streamed through a ParsedRequest, parse_full of the decoded text, that text)."""
    info = tokenizer(kind)
    opts = opts_of(case)
    assert refusal(opts, info) is None
    ids = info.tokenizer.encode(case["text"], add_special_tokens=False).ids
    req = make_request("r", info, opts)
    rows = rows_of(ids, seed)
    deltas: list[Delta] = []
    for n, row in enumerate(rows):
        d = req.row(row, Length() if n == len(rows) - 1 else None, 1, 0, 0)
        if d is not None:
            deltas.append(d)
    text = info.tokenizer.decode(ids, skip_special_tokens=False)
    ref = make_parsed_stream(opts.reasoning_parser, opts.reasoning_started, opts.tool_parser,
                             tools=opts.tools or None).parse_full(text)
    calls: dict[int, list[Any]] = {}
    for d in deltas:
        for c in d.tool_calls or ():
            have = calls.setdefault(c.index, [None, "", False])
            have[0] = c.name if c.name is not None else have[0]
            have[1] += c.arguments
            have[2] = have[2] or c.malformed
    got = ParsedDelta("".join(d.text for d in deltas), "".join(d.reasoning for d in deltas),
                      [ToolCallDelta(i, n, a) for i, (n, a, bad) in sorted(calls.items())
                       if not bad] or None)
    return got, ref, text


def _args(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def disagreement(case: dict[str, Any], got: ParsedDelta) -> str | None:
    """How our result differs from the peer's expectation (None: it agrees)."""
    exp = case["expect"]
    loose = case.get("mode") == "stream"  # the peer held its end back: compare loosely
    for key, ours in (("content", got.text), ("reasoning", got.reasoning)):
        if key not in exp:
            continue
        want = exp[key]
        if ours == want or (loose and (ours.startswith(want) or ours.strip() == want.strip())):
            continue
        return f"{key}: ours {ours!r} peer {want!r}"
    calls = got.tool_calls or []
    if "calls_count" in exp and len(calls) != exp["calls_count"]:
        return f"calls_count: ours {len(calls)} peer {exp['calls_count']}"
    if "calls" in exp:
        want_calls = exp["calls"]
        if len(calls) != len(want_calls):
            return f"calls: ours {[(c.name, c.arguments) for c in calls]} peer {want_calls}"
        for c, w in zip(calls, want_calls):
            if "name" in w and w["name"] != c.name:
                return f"name: ours {c.name!r} peer {w['name']!r}"
            if "arguments" in w:
                if w["arguments"] is None:
                    if _args(c.arguments) is not None or c.arguments != w.get("arguments_raw"):
                        return f"arguments: ours {c.arguments!r} peer raw {w['arguments_raw']!r}"
                elif _args(c.arguments) != w["arguments"]:
                    return f"arguments: ours {c.arguments!r} peer {w['arguments']!r}"
    return None


def all_cases() -> list[tuple[str, dict[str, Any]]]:
    return [(f, c) for f in FILES for c in load_cases(f)]


def calls_of(d: ParsedDelta) -> list[tuple[int, str | None, str]]:
    return [(c.index, c.name, c.arguments) for c in d.tool_calls or ()]


def short(cid: str) -> str:
    return cid.removeprefix("sglang-")


@pytest.mark.parametrize("file,case", [pytest.param(f, c, id=short(c["id"]))
                                       for f, c in all_cases()])
def test_case(file: str, case: dict[str, Any]) -> None:
    for seed in (0, 1):
        got, ref, text = replay(case, FILES[file], seed)
        assert text == case["text"]  # the tokenizer round-trips the case
        assert (got.text, got.reasoning, calls_of(got)) == (
            ref.text, ref.reasoning, calls_of(ref)), "stream != batch"
    why = disagreement(case, got)
    reason = EXPECTED_DIFFERENCES.get(short(case["id"]))
    if reason is None:
        assert why is None, why
    else:
        assert why is not None, f"listed as a difference ({reason}) but agrees now"


# case files this module does not replay: where they are, or why not
REPLAYED_ELSEWHERE = ("test_parser_cases_glm", "test_peer_cases_kimi_llama_gptoss")
NOT_REPLAYED = {"reasoning-minimax-append-think": "SGLang's minimax-append-think is not "
                "offered (protocol.md section 8): `minimax` separates the block instead"}


def test_every_case_file_is_replayed_once() -> None:
    import importlib
    names = [*FILES, *NOT_REPLAYED]
    for module in REPLAYED_ELSEWHERE:
        names += importlib.import_module(module).FILES
    assert len(names) == len(set(names)), "a case file replayed twice"
    assert set(names) == {p.stem for p in (Path(__file__).parent / "parser_cases").glob("*.json")}


def test_every_listed_difference_is_a_case() -> None:
    ids = {short(c["id"]) for _, c in all_cases()}
    assert set(EXPECTED_DIFFERENCES) <= ids


def report() -> None:
    total_ok = total = 0
    for f in FILES:
        cases = load_cases(f)
        ok = 0
        for c in cases:
            got, _, _ = replay(c, FILES[f], 0)
            why = disagreement(c, got)
            ok += why is None
            if why is not None and "-v" in sys.argv:
                print(f"  {short(c['id'])}: {why}")
        listed = sum(short(c["id"]) in EXPECTED_DIFFERENCES for c in cases)
        print(f"{f}: {ok}/{len(cases)} agree, {listed} listed differences")
        total_ok += ok
        total += len(cases)
    print(f"total: {total_ok}/{total}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    report()
