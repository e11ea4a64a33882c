"""hermes: a `<tool_call>` holding a JSON array of calls (issue 18, item 4).

The valid elements are calls in both `tool_stream` modes and in `parse_full`; a malformed
element costs only itself: its text is content (docs/protocol.md section 8) and, when its
name was already streamed, its last delta says `malformed`. Only when no element stands is
the whole call text, as for a single malformed call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_tok.finish import Stop
from sglang_tok.parsers import ParsedDelta, make_parsed_stream, merge
from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import load
from shards.messages.request import make_request

MODES = ["incremental", "whole"]
BRIEF = ('<tool_call>[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {bad}, '
         '{"name": "c", "arguments": {}}]</tool_call>')


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}


def stream(text: str, mode: str, pieces: list[str] | None = None,
           tools: list[dict[str, Any]] | None = None) -> tuple[list[ParsedDelta], ParsedDelta]:
    """Every delta of a streamed run, and `parse_full` of the same text."""
    p = make_parsed_stream("", False, "hermes", tool_stream=mode, tools=tools)
    deltas = [p.feed(x) for x in (list(text) if pieces is None else pieces)] + [p.finish()]
    return deltas, p.parse_full(text)


def calls_of(d: ParsedDelta) -> list[tuple[str | None, Any]]:
    return [(c.name, json.loads(c.arguments)) for c in d.tool_calls or ()]


def same(a: ParsedDelta, b: ParsedDelta) -> bool:
    return (a.text, [(c.index, c.name, c.arguments, c.cut) for c in a.tool_calls or ()],
            a.ended_with_tool_calls) == \
        (b.text, [(c.index, c.name, c.arguments, c.cut) for c in b.tool_calls or ()],
         b.ended_with_tool_calls)


@pytest.mark.parametrize("mode", MODES)
def test_valid_siblings_of_an_unbalanced_element_are_calls(mode: str) -> None:
    deltas, batch = stream(BRIEF, mode)
    got = merge(deltas)
    assert same(got, batch)
    assert calls_of(got) == [("a", {"x": 1}), ("c", {})]
    assert got.text == '{"name": "b", "arguments": {bad}'
    assert got.ended_with_tool_calls
    flagged = [c.index for d in deltas for c in d.tool_calls or () if c.malformed]
    if mode == "incremental":  # b's name and `{bad` left before it went bad: flagged, dropped
        assert flagged == [1]
        assert [c.index for c in got.tool_calls or ()] == [0, 2]
    else:  # nothing of b ever left; indices are those of the calls that stand
        assert flagged == []
        assert [c.index for c in got.tool_calls or ()] == [0, 1]


def test_not_streamed_the_request_gives_the_valid_siblings_once() -> None:
    info = load("deepseek-v4")
    ids = info.tokenizer.encode(BRIEF, add_special_tokens=False).ids
    for mode in MODES:
        req = make_request("r", info, Open("r", tool_parser="hermes", stream=False,
                                           tool_stream=mode))
        out = [req.row([i], Stop() if n == len(ids) - 1 else None, 1, 0, 0)
               for n, i in enumerate(ids)]
        deltas = [d for d in out if d is not None]
        assert len(deltas) == 1
        assert [(c.name, c.arguments) for c in deltas[0].tool_calls or ()] == \
            [("a", '{"x": 1}'), ("c", "{}")]
        assert deltas[0].text == '{"name": "b", "arguments": {bad}'
        assert deltas[0].finish == Stop(tool_calls=True)


# Ported from SGLang: sgl-project/sglang
# test/registered/unit/function_call/test_malformed_tool_call_payloads.py
# (commit 11d40db7c7a56360d0846fd38fe6d3d58ee97abb), TestMalformedToolCallPayloads::
# test_valid_call_survives_a_malformed_sibling (qwen25 = our hermes) and
# test_non_object_array_entries_are_skipped. The peer expects the valid call beside "junk",
# and no calls for arrays of non-objects; it drops the malformed entries silently, where we
# give their text back as content (documented in docs/protocol.md section 8).
@pytest.mark.parametrize("mode", MODES)
def test_sglang_valid_call_survives_a_malformed_sibling(mode: str) -> None:
    payload = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, "junk"]'
    deltas, batch = stream(f"<tool_call>{payload}</tool_call>", mode,
                           tools=[tool("get_weather")])
    got = merge(deltas)
    assert same(got, batch)
    assert [c.name for c in got.tool_calls or ()] == ["get_weather"]
    assert calls_of(got) == [("get_weather", {"city": "Paris"})]
    assert got.text == '"junk"'


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("payload", ["[1, 2]", '["x"]', "[null]", "[[]]", "[]"])
def test_sglang_arrays_of_non_objects_are_no_calls(payload: str, mode: str) -> None:
    text = f"<tool_call>{payload}</tool_call>"
    deltas, batch = stream(text, mode, tools=[tool("get_weather")])
    got = merge(deltas)
    assert same(got, batch)
    assert (got.tool_calls, got.text, got.ended_with_tool_calls) == (None, text, False)


@pytest.mark.parametrize("mode", MODES)
def test_malformed_pieces_keep_what_was_written_between_them(mode: str) -> None:
    """From the first malformed element to the last, less each call that stands and the
    separator before it; text after the `]` is one more piece."""
    text = ('pre <tool_call>\n["x", {"name": "f"}, 3, null, {"name": "g", "arguments": '
            '{"k": [1, {"a": 2}]}}] tail\n</tool_call> post')
    deltas, batch = stream(text, mode)
    got = merge(deltas)
    assert same(got, batch)
    assert calls_of(got) == [("f", {}), ("g", {"k": [1, {"a": 2}]})]
    assert got.text == 'pre "x", 3, null] tail post'


@pytest.mark.parametrize("mode", MODES)
def test_a_name_not_in_tools_costs_only_its_element(mode: str) -> None:
    text = ('<tool_call>[{"name": "zz", "arguments": {"city": "x"}}, '
            '{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_call>')
    deltas, batch = stream(text, mode, tools=[tool("get_weather")])
    got = merge(deltas)
    assert same(got, batch)
    assert calls_of(got) == [("get_weather", {"city": "Oslo"})]
    assert got.text == '{"name": "zz", "arguments": {"city": "x"}}'
    # never sent as a call, so nothing is flagged
    assert all(c.name != "zz" and not c.malformed for d in deltas for c in d.tool_calls or ())


@pytest.mark.parametrize("mode", MODES)
def test_a_balanced_element_with_bad_json_is_dropped_at_its_end(mode: str) -> None:
    text = ('<tool_call>[{"name": "a"}, {"name": "b", "arguments": {bad}}, '
            '{"name": "c", "arguments": {"s": "]}"}}]</tool_call>')
    deltas, batch = stream(text, mode)
    got = merge(deltas)
    assert same(got, batch)
    assert calls_of(got) == [("a", {}), ("c", {"s": "]}"})]
    assert got.text == '{"name": "b", "arguments": {bad}}'


def test_an_element_streams_its_arguments_and_leaves_whole_when_it_ends() -> None:
    """Each element is a call of its own in incremental mode: name first, then the
    arguments as written; its closing brace leaves when the element ends, before the
    next element (or the `</tool_call>`) arrives."""
    head = '<tool_call>[{"name": "a", "arguments": {"q": "long'
    p = make_parsed_stream("", False, "hermes")
    d1 = p.feed(head)
    assert [(c.index, c.name, c.arguments) for c in d1.tool_calls or ()] == \
        [(0, "a", ""), (0, None, '{"q": "long')]
    d2 = p.feed('"}}')
    assert [(c.index, c.arguments) for c in d2.tool_calls or ()] == [(0, '"}')]
    d3 = p.feed(', {"name": "b"}]</tool_call>')
    assert [(c.index, c.name, c.arguments) for c in d3.tool_calls or ()] == \
        [(1, "b", ""), (1, None, "{}")]
    assert p.finish().ended_with_tool_calls


ELEMENTS = ['{"name": "a", "arguments": {"x": 1}}', '{"name": "b", "arguments": {bad}',
            '{"name": "c", "arguments": {}}', '"junk"', "3", "null", "[1, {]", '{"name": 1}',
            '{"name": "d", "arguments": {"s": "}, {\\""}}', "{bad", '{"arguments": {}}',
            '{"name": "zz"}']
SEPARATORS = [", ", ",", " , \n", ",,", " "]


@settings(max_examples=150, deadline=None)
@given(elements=st.lists(st.sampled_from(ELEMENTS), min_size=1, max_size=5),
       seps=st.lists(st.sampled_from(SEPARATORS), min_size=5, max_size=5),
       tail=st.sampled_from(["]", "]\n", "] x", "", "]]"]),
       cuts=st.lists(st.integers(0, 400), max_size=12),
       mode=st.sampled_from(MODES), typed=st.booleans())
def test_any_split_of_an_array_gives_the_batch_result(
        elements: list[str], seps: list[str], tail: str, cuts: list[int], mode: str,
        typed: bool) -> None:
    body = "[" + "".join(e + (seps[i] if i < len(elements) - 1 else "")
                         for i, e in enumerate(elements)) + tail
    text = f"a <tool_call>{body}</tool_call> b"
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[i:j] for i, j in zip([0, *points], [*points, len(text)], strict=True)]
    tools = [tool(n) for n in "abcd"] if typed else None
    deltas, batch = stream(text, mode, pieces, tools)
    got = merge(deltas)
    assert same(got, batch)
    for c in got.tool_calls or ():  # what stands is a call that parses
        assert isinstance(json.loads(c.arguments), dict)
        assert c.name in (["a", "b", "c", "d"] if typed else ["a", "b", "c", "d", "zz"])
