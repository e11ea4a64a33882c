"""Incremental tool-call streaming (issue 18): one test per peer bug, and the new rules.

Each bug test feeds the pieces a server would see and checks the deltas a client would
accumulate; it fails on the behaviour the cited bug report describes.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from typing import Any

import pytest

from sglang_tok.finish import Stop
from sglang_tok.parsers import ParsedDelta, ToolCallDelta, make_parsed_stream, merge
from sglang_tok.parsers.schema import convert, tool_schemas
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import DeltasOut
from sglang_tok.tokenizer import load
from shards.messages.request import make_request
from shards.messages.table import RidTable


def tool(name: str, **props: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in props.items()}}}}


def run(pieces: list[str], fmt: str, reasoning: str = "",
        tools: list[dict[str, Any]] | None = None) -> list[ParsedDelta]:
    p = make_parsed_stream(reasoning, False, fmt, tools=tools)
    return [p.feed(x) for x in pieces] + [p.finish()]


def client(deltas: list[ParsedDelta]) -> dict[int, dict[str, Any]]:
    """What an OpenAI client accumulates per index (name set once, arguments appended)."""
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        for c in d.tool_calls or ():
            call = calls.setdefault(c.index, {"name": None, "arguments": "", "names": 0})
            if c.name is not None:
                call["name"] = c.name
                call["names"] += 1
            call["arguments"] += c.arguments
    return calls


def chars(text: str) -> list[str]:
    return list(text)


def test_vllm_13826_46308_arguments_not_reescaped_nor_duplicated() -> None:
    """vLLM #13826, #46308: streamed arguments were re-serialised with ensure_ascii (东京 ->
    \\u4e1c\\u4eac) and the tail was sent again at the end, so the client's JSON broke."""
    text = '<tool_call>{"name": "w", "arguments": {"city": "東京", "note": "日本語 👍"}}</tool_call>'
    for pieces in (chars(text), [text[:30], text[30:]]):
        calls = client(run(pieces, "hermes"))
        args = calls[0]["arguments"]
        assert args == '{"city": "東京", "note": "日本語 👍"}'  # the model's own bytes
        assert "\\u" not in args and json.loads(args) == {"city": "東京", "note": "日本語 👍"}


@pytest.mark.parametrize("fmt,text", [
    ("hermes", '<tool_call>{"name": "now"}</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=now>\n</function>\n</tool_call>"),
    ("deepseekv4", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="now">\n</｜DSML｜invoke>\n'
     "</｜DSML｜tool_calls>"),
    ("mistral", "[TOOL_CALLS]now[ARGS]{}"),
])
def test_vllm_28806_a_call_without_parameters_gets_braces(fmt: str, text: str) -> None:
    """vLLM #28806: a tool with no parameters streamed arguments "" (or nothing), which
    clients cannot parse; it must be `{}`."""
    for pieces in (chars(text), [text]):
        calls = client(run(pieces, fmt))
        assert [(c["name"], c["arguments"]) for c in calls.values()] == [("now", "{}")]


def test_vllm_45256_multi_token_delta_still_closes_the_json() -> None:
    """vLLM #45256: when the last delta carried several tokens (the end of the arguments
    and the end marker at once), the closing braces were never sent."""
    text = '<tool_call>{"name": "f", "arguments": {"a": {"b": [1, 2]}}}</tool_call>'
    cut = text.index("[1")
    calls = client(run([text[:cut], text[cut:]], "hermes"))
    assert json.loads(calls[0]["arguments"]) == {"a": {"b": [1, 2]}}


@pytest.mark.parametrize("fmt,text", [
    ("hermes", '<tool_call>{"name": "a", "arguments": {"x": "1"}}</tool_call>\n'
     '<tool_call>{"name": "b", "arguments": {"y": 2}}</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</function>\n"
     "</tool_call>\n<tool_call>\n<function=b>\n<parameter=y>\n2\n</parameter>\n</function>\n"
     "</tool_call>"),
])
def test_vllm_41967_sglang_37634_one_delta_closes_a_call_and_opens_the_next(
        fmt: str, text: str) -> None:
    """vLLM #41967, SGLang #37634: a delta holding the end of one call and the start of the
    next lost the first call's tail (its closing brace or last value)."""
    first_end = text.index("</tool_call>")
    second = text.index("<tool_call>", first_end) + len("<tool_call>") + 5
    start = text.index('"x"') if fmt == "hermes" else text.index("<parameter=x>")
    calls = client(run([text[:start], text[start:second], text[second:]], fmt))
    assert [c["name"] for c in calls.values()] == ["a", "b"]
    assert json.loads(calls[0]["arguments"]) == {"x": "1"}
    assert json.loads(calls[1]["arguments"]) == {"y": "2" if fmt == "qwen3_coder" else 2}


def test_vllm_44098_the_last_fragment_does_not_resend_the_name() -> None:
    """vLLM #44098: the call's last delta carried its id and name again, so clients that
    append names produced `get_weatherget_weather`."""
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    for pieces in (chars(text), [text[:25], text[25:]]):
        deltas = run(pieces, "hermes")
        entries = [c for d in deltas for c in d.tool_calls or ()]
        assert entries[0] == ToolCallDelta(0, "get_weather", "")
        assert all(c.name is None for c in entries[1:]) and len(entries) > 1
        assert client(deltas)[0]["names"] == 1


def test_sglang_35564_stream_and_one_shot_agree_on_types_and_indices() -> None:
    """SGLang #35564: the streamed qwen3_coder result typed values differently (strings)
    and numbered calls differently from the non-streamed one."""
    tools = [tool("add", a="integer", b="number", neg="boolean"), tool("say", text="string")]
    text = ("<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\n2.5\n"
            "</parameter>\n<parameter=neg>\nfalse\n</parameter>\n</function>\n</tool_call>\n"
            "<tool_call>\n<function=say>\n<parameter=text>\n42\n</parameter>\n</function>\n"
            "</tool_call>")
    p = make_parsed_stream("", False, "qwen3_coder", tools=tools)
    streamed = merge([p.feed(x) for x in chars(text)] + [p.finish()])
    one_shot = p.parse_full(text)
    whole = make_parsed_stream("", False, "qwen3_coder", tool_stream="whole",
                               tools=tools).parse_full(text)
    want = [ToolCallDelta(0, "add", '{"a": 1, "b": 2.5, "neg": false}'),
            ToolCallDelta(1, "say", '{"text": "42"}')]
    assert streamed.tool_calls == one_shot.tool_calls == whole.tool_calls == want


@pytest.mark.parametrize("fmt,text", [
    ("hermes", '<tool_call>{"name": "f", "arguments": {"s": "x", "o": {"k": {"z": 1}}}}'
     "</tool_call>"),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\n"
     '<parameter=o>\n{"k": {"z": 1}}\n</parameter>\n</function>\n</tool_call>'),
    ("deepseekv4", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="s" '
     'string="true">x</｜DSML｜parameter>\n<｜DSML｜parameter name="o" string="false">'
     '{"k": {"z": 1}}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
])
def test_sglang_32721_outer_brace_kept_when_the_last_argument_is_an_object(
        fmt: str, text: str) -> None:
    """SGLang #32721: when the last argument was an object, the streamed arguments ended
    with the object's `}` and the outer `}` was never sent."""
    calls = client(run(chars(text), fmt, tools=[tool("f", s="string", o="object")]))
    assert json.loads(calls[0]["arguments"]) == {"s": "x", "o": {"k": {"z": 1}}}


def test_vllm_39056_a_tool_call_inside_think_is_not_lost() -> None:
    """vLLM #39056: Qwen3.5 opens `<tool_call>` without closing `<think>`; the call was
    swallowed as reasoning."""
    text = ("<think>I should look it up.\n<tool_call>\n<function=search>\n<parameter=q>\nsglang\n"
            "</parameter>\n</function>\n</tool_call>")
    d = merge(run(chars(text), "qwen3_coder", "qwen3"))
    assert d.reasoning == "I should look it up.\n"
    assert d.tool_calls == [ToolCallDelta(0, "search", '{"q": "sglang"}')]


# ------------------------------------------------------------------ the rules of item 1
def test_string_values_stream_as_generated_and_others_when_they_close() -> None:
    tools = [tool("w", path="string", n="integer")]
    p = make_parsed_stream("", False, "qwen3_coder", tools=tools)
    head = "<tool_call>\n<function=w>\n<parameter=path>\n/tmp/a"
    sent = client([p.feed(head)])[0]["arguments"]
    assert sent == '{"path": "/tmp/a'  # the string leaves before its parameter closes
    d = p.feed(".py\n</parameter>\n<parameter=n>\n12")
    assert client([d])[0]["arguments"] == '.py"'  # 12 is not sent until it closes
    d = p.feed("\n</parameter>\n</function>\n</tool_call>")
    assert client([d])[0]["arguments"] == ', "n": 12}'


def test_a_value_loses_exactly_one_leading_and_trailing_newline() -> None:
    text = ("<tool_call>\n<function=w>\n<parameter=body>\n\nline\n\n</parameter>\n</function>\n"
            "</tool_call>")
    for pieces in (chars(text), [text]):
        assert client(run(pieces, "qwen3_coder"))[0]["arguments"] == '{"body": "\\nline\\n"}'


def test_malformed_after_fragments_says_so_and_gives_the_text_back() -> None:
    text = 'a<tool_call>{"name": "f", "arguments": {"x": 1} junk}</tool_call>b'
    deltas = run(chars(text), "hermes")
    entries = [c for d in deltas for c in d.tool_calls or ()]
    assert entries[0] == ToolCallDelta(0, "f", "") and entries[-1].malformed
    assert not any(c.malformed for c in entries[:-1])
    d = merge(deltas)
    assert (d.text, d.tool_calls, d.ended_with_tool_calls) == (text, None, False)
    assert merge(deltas) == make_parsed_stream("", False, "hermes").parse_full(text)


def test_names_not_in_tools_are_text_never_calls() -> None:
    """With `tools`, a call to another name is given back as text (SGLang drops it; see
    protocol.md section 8), before anything of it is sent as a call."""
    text = ('x<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "ok", "arguments": {}}</tool_call>')
    for mode in ("incremental", "whole"):
        p = make_parsed_stream("", False, "hermes", tool_stream=mode, tools=[tool("ok")])
        deltas = [p.feed(x) for x in chars(text)] + [p.finish()]
        assert all(c.name != "rm_rf" for d in deltas for c in d.tool_calls or ())
        d = merge(deltas)
        assert d.text == 'x<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
        assert [(c.name, c.arguments) for c in d.tool_calls or ()] == [("ok", "{}")]


@pytest.mark.parametrize("text,types,want", [
    ("3", ("integer",), "3"), (" 3 ", ("number",), "3"), ("3.5", ("integer",), '"3.5"'),
    ("2.5", ("number",), "2.5"), ("true", ("boolean",), "true"), ("True", ("boolean",), "true"),
    ("yes", ("boolean",), '"yes"'), ('{"a": 1}', ("object",), '{"a": 1}'),
    ("[1, 2]", ("array",), "[1, 2]"), ("[1", ("array",), '"[1"'), ("null", ("null",), "null"),
    ("null", ("integer", "null"), "null"), ("NaN", ("number",), '"NaN"'),
    ("東京", ("object",), '"東京"'), ("3", (), '"3"'),
])
def test_schema_conversion(text: str, types: tuple[str, ...], want: str) -> None:
    assert convert(text, types) == want


def test_tool_schemas_keep_string_types_as_strings() -> None:
    got = tool_schemas([tool("f", a="string", n="integer"), {"type": "other"},
                        {"type": "function", "function": {"name": "g"}}])
    assert got == {"f": {"a": (), "n": ("integer",)}, "g": {}}


# ------------------------------------------------------------------ wiring
def test_stream_false_gives_one_entry_per_call_and_drops_malformed_ones() -> None:
    info = load("deepseek-v4")
    text = ('<tool_call>{"name": "f", "arguments": {"a": "é"}}</tool_call>'
            '<tool_call>{"name": "g", "arguments": {bad}}</tool_call>')
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    for stream in (True, False):
        req = make_request("r", info, Open("r", tool_parser="hermes", stream=stream))
        out = [req.row([i], Stop() if n == len(ids) - 1 else None, 1, 0, 0)
               for n, i in enumerate(ids)]
        deltas = [d for d in out if d is not None]
        if not stream:
            assert len(deltas) == 1
            assert deltas[0].tool_calls == [ToolCallDelta(0, "f", '{"a": "é"}')]
            assert deltas[0].text == '<tool_call>{"name": "g", "arguments": {bad}}</tool_call>'
        else:
            assert any(c.malformed for d in deltas for c in d.tool_calls or ())
        assert deltas[-1].finish == Stop(tool_calls=True)


def test_tools_over_the_limit_end_the_request_with_an_error() -> None:
    table = RidTable(load("deepseek-v4"), 0, max_tools_bytes=160)
    out: Any = DeltasOut()
    table.on_open(Open("big", tool_parser="qwen3_coder",
                       tools=[tool("f" * 200, a="string")]), out)
    table.on_open(Open("ok", tool_parser="qwen3_coder", tools=[tool("f", a="string")]), out)
    table.on_open(Open("bad", tool_parser="hermes", tool_stream="eventually"), out)
    errors = {d.rid: d.error for d in out}
    assert errors["big"] == "tools exceed --max-tools-bytes 160"
    assert "ok" not in errors and "ok" in table.live
    assert errors["bad"] is not None and "unknown tool_stream 'eventually'" in errors["bad"]


# ------------------------------------------------------------------ glm45, glm47, minimax_m2
GLM45_NOW = "<tool_call>now\n</tool_call>"
GLM47_NOW = "<tool_call>now</tool_call>"
MINIMAX_NOW = '<minimax:tool_call>\n<invoke name="now">\n</invoke>\n</minimax:tool_call>'


@pytest.mark.parametrize("fmt,text", [("glm45", GLM45_NOW), ("glm47", GLM47_NOW),
                                      ("minimax_m2", MINIMAX_NOW)])
def test_vllm_28806_xml_formats_without_parameters_get_braces(fmt: str, text: str) -> None:
    for pieces in (chars(text), [text]):
        calls = client(run(pieces, fmt, tools=[tool("now")]))
        assert [(c["name"], c["arguments"]) for c in calls.values()] == [("now", "{}")]


@pytest.mark.parametrize("fmt,text", [
    ("glm45", "<tool_call>a\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>\n"
     "<tool_call>b\n<arg_key>y</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"),
    ("glm47", "<tool_call>a<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>"
     "<tool_call>b<arg_key>y</arg_key><arg_value>2</arg_value></tool_call>"),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="a">\n<parameter name="x">1</parameter>\n'
     '</invoke>\n<invoke name="b">\n<parameter name="y">2</parameter>\n</invoke>\n'
     "</minimax:tool_call>"),
])
def test_xml_formats_one_delta_closes_a_call_and_opens_the_next(fmt: str, text: str) -> None:
    """vLLM #41967, SGLang #37634 on the GLM and MiniMax formats (x is a string, y an int)."""
    start = text.index('x">' if fmt == "minimax_m2" else "x</arg_key>")  # inside a's key
    b = 'name="b' if fmt == "minimax_m2" else "<tool_call>b"
    second = text.index(b) + len(b)  # the second piece closes a and starts b's name
    tools = [tool("a", x="string"), tool("b", y="integer")]
    calls = client(run([text[:start], text[start:second], text[second:]], fmt, tools=tools))
    assert [c["name"] for c in calls.values()] == ["a", "b"]
    assert [json.loads(c["arguments"]) for c in calls.values()] == [{"x": "1"}, {"y": 2}]


@pytest.mark.parametrize("fmt,text", [
    ("glm45", '<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>x</arg_value>\n<arg_key>o</arg_key>'
     '\n<arg_value>{"k": {"z": 1}}</arg_value>\n</tool_call>'),
    ("glm47", '<tool_call>f<arg_key>s</arg_key><arg_value>x</arg_value><arg_key>o</arg_key>'
     '<arg_value>{"k": {"z": 1}}</arg_value></tool_call>'),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="f">\n<parameter name="s">x</parameter>\n'
     '<parameter name="o">{"k": {"z": 1}}</parameter>\n</invoke>\n</minimax:tool_call>'),
])
def test_sglang_32721_xml_formats_keep_the_outer_brace(fmt: str, text: str) -> None:
    calls = client(run(chars(text), fmt, tools=[tool("f", s="string", o="object")]))
    assert json.loads(calls[0]["arguments"]) == {"s": "x", "o": {"k": {"z": 1}}}


@pytest.mark.parametrize("fmt,head,tail", [
    ("glm45", "<tool_call>w\n<arg_key>path</arg_key>\n<arg_value>", "</arg_value>\n</tool_call>"),
    ("glm47", "<tool_call>w<arg_key>path</arg_key><arg_value>", "</arg_value></tool_call>"),
    ("minimax_m2", '<minimax:tool_call>\n<invoke name="w">\n<parameter name="path">',
     "</parameter>\n</invoke>\n</minimax:tool_call>"),
])
def test_xml_formats_stream_strings_as_generated(fmt: str, head: str, tail: str) -> None:
    """The name leaves once certain; a string value's key and quote with it, then the value
    as it is generated, JSON-escaped with non-ASCII kept."""
    p = make_parsed_stream("", False, fmt, tools=[tool("w", path="string")])
    first = p.feed(head)
    assert first.tool_calls == [ToolCallDelta(0, "w", ""), ToolCallDelta(0, None, '{"path": "')]
    assert client([p.feed('/tmp/東京 "a"\t')])[0]["arguments"] == '/tmp/東京 \\"a\\"\\t'
    assert client([p.feed(tail), p.finish()])[0]["arguments"] == '"}'


def test_glm_values_keep_their_whitespace_and_minimax_loses_its_newlines() -> None:
    """GLM: a value is kept exactly (SGLang and vLLM do not strip it); MiniMax: leading and
    trailing newlines go (SGLang strips them all), other whitespace stays; both modes."""
    glm = "<tool_call>w<arg_key>body</arg_key><arg_value>\n  x \n\n</arg_value></tool_call>"
    mm = ('<minimax:tool_call><invoke name="w"><parameter name="body">\n\n  x \n\n</parameter>'
          "</invoke></minimax:tool_call>")
    for fmt, text, want in [("glm47", glm, '{"body": "\\n  x \\n\\n"}'),
                            ("minimax_m2", mm, '{"body": "  x "}')]:
        for mode in ("incremental", "whole"):
            p = make_parsed_stream("", False, fmt, tool_stream=mode)
            d = merge([p.feed(x) for x in chars(text)] + [p.finish()])
            assert [(c.name, c.arguments) for c in d.tool_calls or ()] == [("w", want)]


def test_xml_formats_type_values_by_the_schema() -> None:
    tools = [tool("f", n="integer", x="number", b="boolean", a="array", s="string")]
    text = ("<tool_call>f<arg_key>n</arg_key><arg_value> 12 </arg_value><arg_key>x</arg_key>"
            "<arg_value>1e3</arg_value><arg_key>b</arg_key><arg_value>True</arg_value>"
            "<arg_key>a</arg_key><arg_value>[1, \"二\"]</arg_value><arg_key>s</arg_key>"
            "<arg_value>12</arg_value><arg_key>extra</arg_key><arg_value>7</arg_value>"
            "</tool_call>")
    want = '{"n": 12, "x": 1000.0, "b": true, "a": [1, "二"], "s": "12", "extra": "7"}'
    for mode in ("incremental", "whole"):
        p = make_parsed_stream("", False, "glm47", tool_stream=mode, tools=tools)
        d = merge([p.feed(x) for x in chars(text)] + [p.finish()])
        assert [(c.name, c.arguments) for c in d.tool_calls or ()] == [("f", want)]
        mm = text.replace("<tool_call>f", '<minimax:tool_call><invoke name="f">').replace(
            "</tool_call>", "</invoke></minimax:tool_call>")
        for k in "nxbase":
            mm = mm.replace(f"<arg_key>{k}</arg_key><arg_value>", f'<parameter name="{k}">')
        mm = mm.replace("<arg_key>extra</arg_key><arg_value>", '<parameter name="extra">')
        mm = mm.replace("</arg_value>", "</parameter>")
        p = make_parsed_stream("", False, "minimax_m2", tool_stream=mode, tools=tools)
        d = merge([p.feed(mm)] + [p.finish()])
        assert [(c.name, c.arguments) for c in d.tool_calls or ()] == [("f", want)]


@pytest.mark.parametrize("text", [
    "a<tool_call>f<arg_key>k</arg_key>junk<arg_value>v</arg_value></tool_call>",
    "a<tool_call>f<arg_key>k</arg_key><arg_value>v</tool_call>",
    "a<tool_call>f<arg_value>v</arg_value></tool_call>",
    "a<tool_call>\n</tool_call>",
    "a<tool_call>f g<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>",
])
def test_malformed_glm_calls_are_text(text: str) -> None:
    for mode in ("incremental", "whole"):
        d = make_parsed_stream("", False, "glm47", tool_stream=mode).parse_full(text)
        assert (d.text, d.tool_calls) == (text, None)


def test_glm45_reasoning_ends_at_a_tool_call_and_minimax_starts_in_reasoning() -> None:
    text = "<think>plan<tool_call>f\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n</tool_call>"
    d = merge(run(chars(text), "glm45", "glm45"))
    assert (d.reasoning, d.text) == ("plan", "")
    assert d.tool_calls == [ToolCallDelta(0, "f", '{"q": "x"}')]
    text = ('still thinking</think>\n\n<minimax:tool_call>\n<invoke name="f">\n'
            '<parameter name="q">x</parameter>\n</invoke>\n</minimax:tool_call>')
    d = merge(run(chars(text), "minimax_m2", "minimax"))
    assert (d.reasoning, d.text) == ("still thinking", "\n\n")
    assert d.tool_calls == [ToolCallDelta(0, "f", '{"q": "x"}')]


# a call with one long string argument, split around the value: (format, head, tail)
LONG_CALLS = [
    ("pythonic", "[search(query='", "', limit=3)]"),
    ("hermes", '<tool_call>\n{"arguments": {"query": "', '"}, "name": "search"}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "', '"}}\n</tool_call>'),
    ("llama3_json", '<|python_tag|>{"name": "search", "parameters": {"query": "', '"}}'),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=query>\n",
     "\n</parameter>\n</function>\n</tool_call>"),
    ("glm47", "<tool_call>search<arg_key>query</arg_key><arg_value>",
     "</arg_value></tool_call>"),
    ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
     '<|tool_call_argument_begin|>{"query": "', '"}<|tool_call_end|><|tool_calls_section_end|>'),
    ("gpt-oss", "<|start|>assistant<|channel|>commentary to=functions.search <|constrain|>json"
     '<|message|>{"query": "', '"}<|call|>'),
]


@pytest.mark.parametrize("fmt,head,tail", LONG_CALLS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LONG_CALLS)])
@pytest.mark.parametrize("mode", ["incremental", "whole"])
def test_a_row_inside_a_long_call_does_not_copy_the_call(fmt: str, head: str, tail: str,
                                                         mode: str) -> None:
    """Work per row must not grow with the call: a reader that re-joins what it sent (or
    the body) on every row is quadratic, ~0.1 ms a row on a 1 MB call (pythonic did). Told
    without timing: the memory a small row allocates, which a copy of the call shows. The
    median over many rows, because the allocator may move a growing body a few times."""
    value = "lorem ipsum " * 20_000  # 240,000 characters
    cut = len(head) + len(value) // 2
    text = head + value + tail
    p = make_parsed_stream("gpt-oss" if fmt == "gpt-oss" else "", False, fmt,
                           tool_stream=mode, tools=[tool("search", query="string")])
    tracemalloc.start()
    try:
        deltas = [p.feed(text[:cut])]
        peaks = []
        for at in range(cut, cut + 6 * 60, 6):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            deltas.append(p.feed(text[at:at + 6]))
            peaks.append(tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()
    deltas += [p.feed(text[cut + 6 * 60:]), p.finish()]
    assert sorted(peaks)[len(peaks) // 2] < 4096, peaks
    got = client(deltas)
    assert [c["name"] for c in got.values()] == ["search"]
    assert json.loads(got[0]["arguments"])["query"] == value


@pytest.mark.parametrize("fmt,call", [
    ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=query>\na\n</parameter>\n"
     "</function>\n</tool_call>"),
])
def test_content_after_a_call_takes_the_plain_route_and_keeps_its_whitespace_rule(
        fmt: str, call: str) -> None:
    """After a call, content rows skip the engine again once its text has left (they all
    went through `step` before), except a piece ending with whitespace: after a call that
    whitespace waits as markup, dropped if another call follows, so the route must not
    release it."""
    p = make_parsed_stream("", False, fmt, tools=[tool("search", query="string")])
    pieces = [call, "Done", ".", " Next", " \n", call, " bye"]
    deltas, plain = [], []
    for x in pieces:
        deltas.append(p.feed(x))
        plain.append(p.plain)
    deltas.append(p.finish())
    assert plain[1:4] == [True, True, True]  # "Done", ".", " Next": all content
    assert plain[4] is False  # " \n" is held, as markup
    got = merge(deltas)
    assert got == p.parse_full("".join(pieces))
    assert got.text == "Done. Next bye"
    assert len(got.tool_calls or ()) == 2


@pytest.mark.parametrize("value", ["'a\\nb\\tc\\rd'", "'\\\\ \\' \\\" \\a\\b\\f\\v'", "0", "-0",
                                   " 12 ", "\n-5\n", "123456789012345678",
                                   "1234567890123456789", "True", " None ", "False\n", "007"])
def test_pythonic_shortcut_conversions_equal_ast(value: str) -> None:
    """Incremental pythonic converts ints, constants and one-letter escapes itself (no
    compile each); whole mode converts the call by `ast`: both must give the same bytes,
    and a value Python rejects (`007`) stays text in both."""
    text = f"[f(v={value}, w=1)]"
    inc = make_parsed_stream("", False, "pythonic")
    streamed = merge([inc.feed(c) for c in text] + [inc.finish()])
    whole = make_parsed_stream("", False, "pythonic", tool_stream="whole").parse_full(text)
    assert (streamed.text, streamed.tool_calls) == (whole.text, whole.tool_calls)
    assert (whole.tool_calls is None) == (value == "007")



_PY_KEYS = ["a", "b", "class", "__debug__", "é", "a"]
_PY_VALUES = ["'x'", '"y\\n"', "1", "None", "[1, 'a']", "{'k': (1,)}", "'東京'", "'\\x41'",
              "'a\\'b'", "1e999", "b'x'", "''", "'''t'''", "'\\x00'", "'a\x00b'", "'a\rb'",
              "1 #c\n", "'\\\n'", "x", "'a' 'b'", "'a\x0cb'", "'\\N{BULLET}'", "[[[[[1]]]]]",
              "'a # b'", "[1, # c\n 2]", "'#' # '\n"]
_PY_BLANKS = ["", " ", "\n", "\t", "\x0c", "\u3000", "\r", " # c\n", "# it's ) ] }\n", " #é\r",
              " \\\n", "#\x00\n", "# \\\n"]


def test_pythonic_without_ast_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Incremental pythonic ends a call it read whole without `ast` (its arguments are
    what was sent), and a list whose rest is ASCII blanks and commas without parsing the
    list again. Over calls built to reach the edges of both shortcuts (repeated and
    reserved keywords, non-ASCII names, blanks and comments Python refuses or takes, NUL
    and CR in strings, values the reader cannot take), in chunkings of 1-5 characters,
    the result is the one `ast` gives with both shortcuts turned off, stream == batch,
    and whole mode (the list parsed by `ast` at once) gives the same text and calls.
    Comments (with brackets, quotes, a backslash, NUL, ended by CR) and line continuations
    stand between arguments, between calls and after the last one (issue 18: the
    incremental reader used to make a comment between calls malformed)."""
    from sglang_tok.parsers import pythonic

    rng = random.Random(18)

    def blank(odd: bool) -> str:
        return rng.choice(_PY_BLANKS[:None if odd else 3])

    texts = []
    for _ in range(400):
        calls = []
        for _ in range(rng.randint(1, 3)):
            odd = rng.random() < 0.3  # else only plain values, keywords and blanks
            kws = ",".join(f"{blank(odd)}{rng.choice(_PY_KEYS[:None if odd else 2])}="
                           f"{rng.choice(_PY_VALUES[:None if odd else 8])}{blank(odd)}"
                           for _ in range(rng.randint(0, 2)))
            calls.append(f"{rng.choice(['f', 'g . h', 'None', 'é'][:None if odd else 2])}({kws})")
        last = len(calls) - 1
        odd = rng.random() < 0.3
        texts.append("[" + "".join(c + blank(odd) + ("," if i < last else "") + blank(odd)
                                   for i, c in enumerate(calls))
                     + "] end")

    def run() -> list[ParsedDelta]:
        out = []
        for n, text in enumerate(texts):
            k = n % 5 + 1
            p = make_parsed_stream("", False, "pythonic")
            got = merge([p.feed(text[i:i + k]) for i in range(0, len(text), k)] + [p.finish()])
            assert got == p.parse_full(text), text
            whole = make_parsed_stream("", False, "pythonic", tool_stream="whole").parse_full(text)
            assert (got.text, got.tool_calls) == (whole.text, whole.tool_calls), text
            out.append(got)
        return out

    fast = run()
    assert sum(bool(d.tool_calls) for d in fast) > 150  # the cases reach both shortcuts
    # and comments stand where calls were found (between calls, after the last one)
    assert sum(bool(d.tool_calls) and "#" in t.split("(")[-1] for d, t in zip(fast, texts)) > 10
    monkeypatch.setattr(pythonic.PythonicReader, "_read_whole", lambda self, body, end: False)
    monkeypatch.setattr(pythonic.PythonicReader, "_joined", lambda self, body: False)
    assert run() == fast
