"""The example OpenAI server with parsers on (issue 11, point 6), through the `openai` package.

The server runs with SGLang's flags `--reasoning-parser deepseek-r1 --tool-call-parser
deepseekv4`; its simulated model thinks first and calls the first tool offered. Each
response must equal `parse_full` of the full decode of the ids the scheduler generated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai_server_run import generated, oai, running_server

from sglang_tok.parsers import FORMATS, ParsedDelta, make_parsed_stream
from sglang_tok.tokenizer import load

MSG = [{"role": "user", "content": "What is the weather in 東京?"}]
TOOLS: Any = [{"type": "function", "function": {
    "name": "search", "description": "web search",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "n": {"type": "integer"}}}}}]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("oai-parsers"), "--shards", "1", "--step-ms",
                        "1", "--reasoning-parser", "deepseek-r1",
                        "--tool-call-parser", "deepseekv4") as url:
        yield url


def reference(base: str, cid: str) -> ParsedDelta:
    gen = generated(base, cid)
    ids = gen["ids"]
    if gen["scheduler_finish"]["type"] == "stop":
        ids = ids[:-1]  # the EOS the scheduler matched is no text
    text = load("deepseek-v4").tokenizer.decode(ids, skip_special_tokens=True)
    # reasoning_started absent, as the server's OPEN has it: deepseek-r1's default
    return make_parsed_stream("deepseek-r1", None, "deepseekv4", tools=TOOLS).parse_full(text)


def test_streamed_reasoning_content_tool_calls_and_finish_reason(base: str) -> None:
    stream = oai(base).chat.completions.create(model="m", messages=MSG, tools=TOOLS, seed=4,
                                               stream=True, max_tokens=1000)
    reasoning = content = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    cid = ""
    for c in stream:
        cid = c.id
        if not c.choices:
            continue
        delta = c.choices[0].delta
        reasoning += getattr(delta, "reasoning_content", None) or ""
        content += delta.content or ""
        for tc in delta.tool_calls or ():
            have = calls.setdefault(tc.index, {"name": None, "arguments": "", "id": None})
            if tc.function is not None:
                have["name"] = tc.function.name or have["name"]
                have["arguments"] += tc.function.arguments or ""
            have["id"] = tc.id or have["id"]
        finish = c.choices[0].finish_reason or finish
    want = reference(base, cid)
    assert want.reasoning and want.tool_calls  # the simulated model thought, then called
    assert (reasoning, content) == (want.reasoning, want.text)
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == [
        (w.name, w.arguments) for w in want.tool_calls]
    assert calls[0]["id"] and calls[0]["name"] == "search"
    assert json.loads(calls[0]["arguments"]) == {"query": MSG[0]["content"], "n": 3}
    assert finish == "tool_calls"


def test_non_streamed_message_equals_the_stream(base: str) -> None:
    res = oai(base).chat.completions.create(model="m", messages=MSG, tools=TOOLS, seed=4,
                                            max_tokens=1000)
    msg = res.choices[0].message
    want = reference(base, res.id)
    assert getattr(msg, "reasoning_content", None) == want.reasoning
    assert msg.content == want.text
    assert [(t.function.name, t.function.arguments) for t in msg.tool_calls or ()] == [
        (w.name, w.arguments) for w in want.tool_calls or ()]
    assert res.choices[0].finish_reason == "tool_calls"


def test_the_body_selects_or_disables_parsers(base: str) -> None:
    client = oai(base)
    res = client.chat.completions.create(model="m", messages=MSG, seed=8, max_tokens=1000,
                                         extra_body={"reasoning_parser": "", "tool_parser": ""})
    assert getattr(res.choices[0].message, "reasoning_content", None) is None
    assert res.choices[0].message.content == generated(base, res.id)["text"]
    assert res.choices[0].finish_reason == "stop"
    r = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
        "model": "m", "messages": MSG, "tool_parser": "nope"})
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "unknown tool_parser 'nope' (from the body); known: "
                   f"{', '.join(sorted(FORMATS))}",
        "type": "invalid_request_error", "param": "tool_parser", "code": "invalid_value"}
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="m", messages=MSG, stream=True,
                                       extra_body={"reasoning_parser": "r9"})
    assert exc.value.param == "reasoning_parser"


# every tool parser the example's simulated model can write (a new parser joins by name,
# once `sim_scheduler.tool_call_text` writes its format)
TOOL_PARSERS = ["deepseekv4", "deepseekv32", "deepseekv3", "deepseekv31", "hermes", "mistral",
                "qwen3_coder", "glm45", "glm47", "minimax_m2", "kimi_k2", "gpt-oss",
                "llama3_json", "pythonic"]


def test_every_format_is_simulated() -> None:
    """A new format must join TOOL_PARSERS (and get a writer in `tool_call_text`); names
    that are aliases of one format need not."""
    assert {id(FORMATS[n]) for n in TOOL_PARSERS} == {id(f) for f in FORMATS.values()}


def accumulate(stream: Any) -> tuple[list[dict[str, Any]], str | None, Any]:
    """The streamed tool calls accumulated as OpenAI's documentation shows (a new entry on
    an index first seen, `arguments` appended), the finish reason, and its chunk's delta."""
    final: dict[int, dict[str, Any]] = {}
    finish, finish_delta = None, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        for tc in choice.delta.tool_calls or []:
            if tc.index not in final:
                final[tc.index] = {"id": tc.id, "type": tc.type, "name": tc.function.name,
                                   "arguments": tc.function.arguments or ""}
            else:
                assert tc.id is None and tc.type is None and tc.function.name is None
                final[tc.index]["arguments"] += tc.function.arguments or ""
        if choice.finish_reason is not None:
            finish, finish_delta = choice.finish_reason, choice.delta
    return [final[i] for i in sorted(final)], finish, finish_delta


@pytest.mark.parametrize("mode", ["incremental", "whole"])
@pytest.mark.parametrize("parser", TOOL_PARSERS)
def test_streamed_tool_calls_accumulate_to_the_message(base: str, parser: str,
                                                       mode: str) -> None:
    client = oai(base)
    body = {"tool_parser": parser, "reasoning_parser": "", "tool_stream": mode}
    streamed, finish, finish_delta = accumulate(client.chat.completions.create(
        model="m", messages=MSG, tools=TOOLS, seed=5, stream=True, max_tokens=1000,
        extra_body=body))
    res = client.chat.completions.create(model="m", messages=MSG, tools=TOOLS, seed=5,
                                         max_tokens=1000, extra_body=body)
    message = [{"id": t.id, "type": t.type, "name": t.function.name,
                "arguments": t.function.arguments} for t in res.choices[0].message.tool_calls or ()]
    assert [{**c, "id": None} for c in streamed] == [{**c, "id": None} for c in message]
    assert all(c["id"] and c["type"] == "function" for c in streamed)
    assert [c["name"] for c in message] == ["search"]
    # the schema types `n` for the XML format too (tools went to OPEN)
    assert json.loads(message[0]["arguments"]) == {"query": MSG[0]["content"], "n": 3}
    assert finish == res.choices[0].finish_reason == "tool_calls"
    assert not (finish_delta.content or finish_delta.tool_calls)  # a chunk of its own


def test_tool_choice_none_turns_tool_parsing_off(base: str) -> None:
    res = oai(base).chat.completions.create(model="m", messages=MSG, tools=TOOLS, seed=5,
                                            max_tokens=1000, tool_choice="none",
                                            extra_body={"reasoning_parser": ""})
    assert res.choices[0].message.tool_calls is None
    assert res.choices[0].finish_reason == "stop"


def test_the_body_maps_to_open_options() -> None:
    """`tools` and `tool_stream` go to OPEN (the service then types values by the schemas
    and gives a call to another name back as text); `tool_choice: "none"` sends neither."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from openai_server import parse
    p = parse({"messages": MSG, "tools": TOOLS, "tool_stream": "whole"}, True, "m",
              "", "hermes")
    assert (p.tool_defs, p.tool_stream, p.tool_parser) == (TOOLS, "whole", "hermes")
    none = parse({"messages": MSG, "tools": TOOLS, "tool_choice": "none"}, True, "m", "",
                 "hermes")
    assert (none.tool_parser, none.tool_defs) == ("", [])
