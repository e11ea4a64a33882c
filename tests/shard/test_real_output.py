"""What real model output looks like (issue 18, item 4): one test per shape, with its source.

Each runs the text through every split into single characters and in one piece, in both
streaming modes, and checks stream == batch as well as the expected result; the service
level tests feed ids of the built-in DeepSeek-V4 tokenizer through a shard's request.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang_tok.finish import Length, Stop
from sglang_tok.parsers import ParsedDelta, make_parsed_stream, merge
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import load
from shards.messages.request import make_request

D = "｜DSML｜"
MODES = ["incremental", "whole"]


def invoke(name: str, **params: str) -> str:
    body = "".join(f'<{D}parameter name="{k}" string="true">{v}</{D}parameter>\n'
                   for k, v in params.items())
    return f'<{D}invoke name="{name}">\n{body}</{D}invoke>'


def parse(text: str, fmt: str = "deepseekv4", mode: str = "incremental",
          reasoning: str = "", started: bool | None = None,
          tools: list[dict[str, Any]] | None = None) -> ParsedDelta:
    """parse_full, after checking that char-by-char streaming gives the same."""
    p = make_parsed_stream(reasoning, started, fmt, tool_stream=mode, tools=tools)
    full = p.parse_full(text)
    streamed = merge([p.feed(c) for c in text] + [p.finish()])
    assert (streamed.text, streamed.reasoning, calls(streamed)) == (
        full.text, full.reasoning, calls(full))
    return full


def calls(d: ParsedDelta) -> list[tuple[str | None, str]]:
    return [(c.name, c.arguments) for c in d.tool_calls or ()]


# ------------------------------------------------------------------ DSML
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt,section", [("deepseekv4", "tool_calls"),
                                         ("deepseekv32", "function_calls")])
def test_self_closing_invoke_is_a_call_without_arguments(fmt: str, section: str,
                                                         mode: str) -> None:
    """SGLang test_function_call_parser.py TestDeepSeekV4Detector /
    TestDeepSeekV32Detector::test_self_closing_zero_arg_invoke, and
    test_self_closing_mixed_with_long_form."""
    text = (f"Final answer.\n<{D}{section}>\n{invoke('spot', city='SF')}\n"
            f'<{D}invoke name="submit"/>\n</{D}{section}>')
    d = parse(text, fmt, mode)
    assert d.text == "Final answer.\n"
    assert calls(d) == [("spot", '{"city": "SF"}'), ("submit", "{}")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cut", [2, 4])
def test_a_self_closing_invoke_ends_without_a_later_marker(mode: str, cut: int) -> None:
    """The head's `/>` arriving in a piece of its own (or with text after it) ends the
    call even when no later piece holds a `<`: pieces inside an unsettled head go to the
    engine's end search, not straight to the reader (they were absorbed, so the call was
    reported cut and the text after it lost)."""
    head = f'<{D}invoke name="f"/>'
    for pieces in ([head[:-cut], head[-cut:], " done"], [head[:-cut], head[-cut:] + " done"]):
        p = make_parsed_stream("", None, "deepseekv4", tool_stream=mode)
        got = merge([p.feed(x) for x in pieces] + [p.finish()])
        assert (got.text, calls(got)) == (" done", [("f", "{}")]), pieces


@pytest.mark.parametrize("mode", MODES)
def test_invoke_without_the_wrapper_is_a_call(mode: str) -> None:
    """SGLang test_deepseekv4_detector.py::test_preamble_before_bare_invoke_without_wrapper
    (the model drops `<｜DSML｜tool_calls>` at long context)."""
    d = parse(f"Checking.\n{invoke('get_weather', city='SF')}\n{invoke('now')}", mode=mode)
    assert d.text == "Checking.\n"
    assert calls(d) == [("get_weather", '{"city": "SF"}'), ("now", "{}")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wrapper", [
    f"<{D}toolcalls>\n",  # vLLM #51914: DeepSeek-V4-Flash writes `toolcalls`
    f"<{D}tool>\n",  # vLLM #56141: `<｜DSML｜tool>`
    f"<{D}tool_calls\n",  # no `>`
    f"<{D}tool_calls...",  # an ellipsis, then the invoke on the same line
    f"<{D}tool_calls> let me call it\n",  # stray words after it
])
def test_a_damaged_wrapper_is_markup_and_its_invokes_are_calls(wrapper: str, mode: str) -> None:
    """vLLM #51914 / #56141 (production DeepSeek-V4 output: the start wrapper misspelt);
    the damaged closer `</｜DSML｜toolcalls>` is markup too."""
    text = f"Sure.\n{wrapper}{invoke('a', x='1')}\n{invoke('b')}\n</{D}toolcalls>"
    d = parse(text, mode=mode)
    assert d.text == "Sure.\n"
    assert calls(d) == [("a", '{"x": "1"}'), ("b", "{}")]


@pytest.mark.parametrize("mode", MODES)
def test_a_damaged_wrapper_without_a_call_stays_text(mode: str) -> None:
    text = f"The wrapper is <{D}toolcalls> (misspelt) and nothing follows."
    assert parse(text, mode=mode).text == text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("quote", [
    "```\n{call}\n```\n",
    "```xml\n{call}\n```\n",
    "~~~\n{call}\n~~~\n",
    "  ````\n{call}\n````\n",
    "Write `{call}` to call a tool.\n",
    "Use ``{call}`` here.\n",
])
def test_dsml_quoted_in_code_is_content_never_a_call(quote: str, mode: str) -> None:
    """A model explaining the format must not invoke a tool (issue 18 item 4; SGLang's
    detectors execute it). After the quote closes, a real call is a call again."""
    call = f"<{D}tool_calls>\n{invoke('rm', path='/')}\n</{D}tool_calls>"
    if "`{call}`" in quote:  # an inline span is one line
        call = call.replace("\n", "")
    quoted = quote.format(call=call)
    for call in (quoted.replace(f"<{D}tool_calls>", ""), quoted):
        text = "Like this:\n" + call + invoke("ok")
        d = parse(text, mode=mode)
        assert calls(d) == [("ok", "{}")]
        assert d.text == "Like this:\n" + call


@pytest.mark.parametrize("mode", MODES)
def test_a_repeated_parameter_keeps_its_last_value(mode: str) -> None:
    """Both values are written, in order, as the DSML text has them (a streamed value
    cannot be taken back); every JSON parser keeps the last, as SGLang's dict does."""
    text = f"<{D}tool_calls>\n{invoke('f', a='1', b='x')}\n</{D}tool_calls>".replace(
        f'<{D}parameter name="b"', f'<{D}parameter name="a" string="true">2</{D}parameter>\n'
        f'<{D}parameter name="b"')
    d = parse(text, mode=mode)
    assert calls(d) == [("f", '{"a": "1", "a": "2", "b": "x"}')]
    assert json.loads(calls(d)[0][1]) == {"a": "2", "b": "x"}


@pytest.mark.parametrize("mode", MODES)
def test_a_string_false_value_that_is_not_json_is_its_raw_string(mode: str) -> None:
    """SGLang deepseekv32/v4 detectors: `json.loads` failing keeps the raw value."""
    text = (f'<{D}invoke name="f">\n<{D}parameter name="n" string="false">not json'
            f'</{D}parameter>\n<{D}parameter name="m" string="false"> 3 </{D}parameter>\n'
            f"</{D}invoke>")
    assert calls(parse(text, mode=mode)) == [("f", '{"n": "not json", "m": 3}')]


# ------------------------------------------------------------------ other formats
@pytest.mark.parametrize("mode", MODES)
def test_deepseek_v31_call_without_the_outer_section_is_a_call(mode: str) -> None:
    """SGLang's DeepSeekV31Detector accepts `<｜tool▁call▁begin｜>` on its own."""
    text = 'Ok.<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
    d = parse(text, "deepseekv31", mode)
    assert (d.text, calls(d)) == ("Ok.", [("get_weather", '{"city": "Paris"}')])


def test_deepseek_r1_starts_inside_reasoning_unless_told_otherwise() -> None:
    """SGLang's DeepSeekR1Detector has force_reasoning=True: R1 templates end the prompt
    with `<think>`, so the output starts inside the block. OPEN without
    `reasoning_started` gets that; an OPEN that says false keeps its old meaning."""
    text = "the user wants 2+2</think>4"
    assert (parse(text, "", reasoning="deepseek-r1").reasoning) == "the user wants 2+2"
    assert parse("<think>hm</think>4", "", reasoning="deepseek-r1").text == "4"
    said = parse(text, "", reasoning="deepseek-r1", started=False)
    assert (said.text, said.reasoning) == (text, "")
    assert parse(text, "", reasoning="qwen3").text == text  # qwen3's default is unchanged
    info = load("deepseek-v4")
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    for opts in (Open("r", reasoning_parser="deepseek-r1"),
                 Open("r", reasoning_parser="deepseek-r1", reasoning_started=False)):
        req = make_request("r", info, opts)
        out = [req.row(ids[i:i + 2], Length() if i + 2 >= len(ids) else None,
                       1, 0, 0) for i in range(0, len(ids), 2)]
        reasoning = "".join(d.reasoning for d in out if d is not None)
        assert reasoning == ("the user wants 2+2" if opts.reasoning_started is None else "")


@pytest.mark.parametrize("fmt,text", [
    ("deepseekv4", f'<{D}tool_calls>\n<{D}invoke name="write">\n<{D}parameter name="body" '
     'string="true">line one\nline two, still'),
    ("hermes", '<tool_call>{"name": "write", "arguments": {"body": "line one\\nline two, still'),
])
def test_a_call_cut_by_the_length_limit_stands_as_sent_and_says_cut(fmt: str, text: str) -> None:
    """Incremental mode, through a shard's request on DeepSeek-V4 ids in rows of 3: the
    name and the arguments sent so far stand; the last delta says `cut` and the finish
    says tool_calls."""
    info = load("deepseek-v4")
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    req = make_request("r", info, Open("r", tool_parser=fmt))
    rows = [ids[i:i + 3] for i in range(0, len(ids), 3)]
    out: list[Delta] = []
    for n, row in enumerate(rows):
        d = req.row(row, Length() if n == len(rows) - 1 else None, 1, 0, 0)
        if d is not None:
            out.append(d)
    entries = [c for d in out for c in d.tool_calls or ()]
    assert entries[0].name == "write" and entries[-1].cut
    sent = "".join(c.arguments for c in entries)
    assert sent.startswith('{"body": "line one\\nline two')
    assert "".join(d.text for d in out) == ""
    assert out[-1].finish == Length(tool_calls=True)


def test_quoting_is_seen_through_the_shards_hot_path() -> None:
    """Pieces without `<` skip the parser in the shard's hot branch; the Markdown state
    must still see them (DeepSeek-V4 ids in rows of 1 and 2)."""
    text = ("Example:\n```\n" + invoke("rm", path="/") + "\n```\nand `" + invoke("rm")
            + "` inline.\n" + invoke("ok"))
    info = load("deepseek-v4")
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    for size in (1, 2):
        req = make_request("r", info, Open("r", tool_parser="deepseekv4"))
        out = [req.row(ids[i:i + size], Stop() if i + size >= len(ids) else None,
                       1, 0, 0) for i in range(0, len(ids), size)]
        deltas = [d for d in out if d is not None]
        names = [c.name for d in deltas for c in d.tool_calls or () if c.name]
        assert names == ["ok"]
        assert "".join(d.text for d in deltas) == text[:text.rindex("<｜DSML｜invoke")]
