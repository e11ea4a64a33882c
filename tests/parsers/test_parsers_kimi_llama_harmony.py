"""kimi_k2, llama3_json, pythonic and gpt-oss (Harmony): grammar examples, and stream == batch.

The same two property tests as tests/parsers/test_parsers.py: any split of marker-rich text, and
outputs built from a known structure, encoded with a byte-level BPE whose model markers are
special added tokens (as in Kimi-K2's, Llama's and gpt-oss's vocabularies), decoded in rows
of 1-8 ids (with and without skip_special_tokens, markers kept visible), in both
`tool_stream` modes. The streamed result (call ids included) must equal `parse_full` of the
full decode; for well-formed outputs it must also give back the structure.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from marker_outputs import HARMONY, KIMI, SPECIALS, marker_tokenizer, outputs
from parser_outputs import check_call_deltas, decode_rows, split_text
from strategies import chunk, chunk_sizes

from sglang_tok.parsers import (
    ParsedDelta,
    ParserError,
    ToolCallDelta,
    make_parsed_stream,
    make_reasoning_parser,
    marker_token_ids,
    merge,
)
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import DeltasOut
from shards.byte_level.table import byte_level_table, skip_table
from shards.messages.table import RidTable

MODES = ["incremental", "whole"]


def full(reasoning: str = "", started: bool = False, fmt: str = "", text: str = "",
         **kw: Any) -> ParsedDelta:
    return make_parsed_stream(reasoning, started, fmt, **kw).parse_full(text)


def calls_of(d: ParsedDelta) -> list[tuple[str | None, str, str | None]]:
    return [(c.name, c.arguments, c.id) for c in d.tool_calls or ()]


# ------------------------------------------------------------------ grammar examples
KIMI_TWO = ('Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0'
            '<|tool_call_argument_begin|>{"city": "東京"}<|tool_call_end|>\n<|tool_call_begin|> '
            'functions.lookup.v2:1 <|tool_call_argument_begin|> {} <|tool_call_end|>'
            '<|tool_calls_section_end|>')


@pytest.mark.parametrize("mode", MODES)
def test_kimi_k2_calls_names_and_ids(mode: str) -> None:
    d = full(fmt="kimi_k2", text=KIMI_TWO, tool_stream=mode)
    assert d.text == "Checking."
    assert calls_of(d) == [("get_weather", '{"city": "東京"}', "functions.get_weather:0"),
                           ("lookup.v2", "{}", "functions.lookup.v2:1")]
    assert d.ended_with_tool_calls


def test_kimi_k2_id_is_on_the_first_delta_only() -> None:
    p = make_parsed_stream(tool_parser="kimi_k2")
    entries = [c for ch in KIMI_TWO for c in p.feed(ch).tool_calls or ()]
    entries += p.finish().tool_calls or []
    firsts = [c for c in entries if c.name is not None]
    assert [c.id for c in firsts] == ["functions.get_weather:0", "functions.lookup.v2:1"]
    assert all(c.id is None for c in entries if c.name is None)
    assert firsts[0] == ToolCallDelta(0, "get_weather", "", id="functions.get_weather:0")


def test_call_id_is_omitted_on_the_wire_when_absent() -> None:
    """`id` is omit_defaults: a delta of a format without ids has the same bytes as before."""
    enc = msgspec.msgpack.encode
    assert enc(ToolCallDelta(0, "f", "")) == enc({"index": 0, "name": "f"})
    assert enc(ToolCallDelta(0, "f", "", id="functions.f:0")) == \
        enc({"index": 0, "name": "f", "id": "functions.f:0"})
    merged = merge([ParsedDelta(tool_calls=[ToolCallDelta(0, "f", "", id="x:0")]),
                    ParsedDelta(tool_calls=[ToolCallDelta(0, None, "{}")])])
    assert merged.tool_calls == [ToolCallDelta(0, "f", "{}", id="x:0")]


@pytest.mark.parametrize("text", [
    "a<|tool_calls_section_begin|><|tool_call_begin|>weird@id<|tool_call_argument_begin|>{}"
    "<|tool_call_end|><|tool_calls_section_end|>",
    "<|tool_calls_section_begin|><|tool_call_begin|>0<|tool_call_argument_begin|>{}"
    "<|tool_call_end|><|tool_calls_section_end|>",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
    '{"a": fasle}<|tool_call_end|><|tool_calls_section_end|>',
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
    "[1]<|tool_call_end|><|tool_calls_section_end|>",
])
@pytest.mark.parametrize("mode", MODES)
def test_kimi_k2_malformed_calls_are_text(text: str, mode: str) -> None:
    d = full(fmt="kimi_k2", text=text, tool_stream=mode)
    assert (d.text, d.tool_calls, d.ended_with_tool_calls) == (text, None, False)


def test_kimi_k2_section_begin_ends_reasoning() -> None:
    text = ("<think>I will read it.<|tool_calls_section_begin|><|tool_call_begin|>functions.Read:0"
            '<|tool_call_argument_begin|>{"path": "/a"}<|tool_call_end|><|tool_calls_section_end|>')
    d = full("kimi_k2", fmt="kimi_k2", text=text)
    assert (d.reasoning, d.text) == ("I will read it.", "")
    assert calls_of(d) == [("Read", '{"path": "/a"}', "functions.Read:0")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("text,content,calls", [
    ('{"name": "f", "parameters": {"a": 1}}', "", [("f", '{"a": 1}')]),
    ('  <|python_tag|>{"name": "f", "arguments": {"s": "}"}}', "  ", [("f", '{"s": "}"}')]),
    ('{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"x": [1]}}', "",
     [("f", "{}"), ("g", '{"x": [1]}')]),
    ('<|python_tag|>{"name": "f", "parameters": {}}<|python_tag|>{"name": "g", '
     '"parameters": {}}', "", [("f", "{}"), ("g", "{}")]),
    ('Intro. <|python_tag|>{"name": "f", "parameters": {}}; then text', "Intro. ; then text",
     [("f", "{}")]),
    ('{"answer": 42}', '{"answer": 42}', []),
    ('x {"name": "f", "parameters": {}}', 'x {"name": "f", "parameters": {}}', []),
])
def test_llama3_json(text: str, content: str, calls: list[tuple[str, str]], mode: str) -> None:
    d = full(fmt="llama3_json", text=text, tool_stream=mode)
    assert d.text == content
    assert [(c.name, c.arguments) for c in d.tool_calls or ()] == calls


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("text,content,calls", [
    ('{"name": "f", "parameters": {}}x; {"name": "g", "parameters": {}}',
     'x; {"name": "g", "parameters": {}}', [("f", "{}")]),
    ('{"name": "f", "parameters": {}} \n; {"name": "g", "parameters": {}}', "",
     [("f", "{}"), ("g", "{}")]),
    ('{"name": "f", "parameters": {}}<; {"name": "g", "parameters": {}}',
     '<; {"name": "g", "parameters": {}}', [("f", "{}")]),
])
def test_llama3_json_chain_only_right_after_a_call(text: str, content: str,
                                                   calls: list[tuple[str, str]],
                                                   mode: str) -> None:
    """A `;` separator opens an unmarked call only with nothing but whitespace since the
    last call: text in between makes it text, whether the text arrives in one piece or
    character by character (the engine once kept chaining after text when it came in
    another piece; found by the stream == batch property)."""
    p = make_parsed_stream("", False, "llama3_json", tool_stream=mode)
    streamed = merge([p.feed(c) for c in text] + [p.finish()])
    for d in (streamed, full(fmt="llama3_json", text=text, tool_stream=mode)):
        assert d.text == content
        assert [(c.name, c.arguments) for c in d.tool_calls or ()] == calls


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("text,content,calls", [
    ("[get_weather(city='Paris', days=[1, 2]), now()]", "",
     [("get_weather", '{"city": "Paris", "days": [1, 2]}'), ("now", "{}")]),
    ('Sure: <|python_start|>[a.b(x=None, y=True, t=(1, "é"))]<|python_end|> done', "Sure:  done",
     [("a.b", '{"x": null, "y": true, "t": [1, "é"]}')]),
    ("see [the docs](http://x) and [1, 2]", "see [the docs](http://x) and [1, 2]", []),
    ("[f(1)]", "[f(1)]", []),
    ("[f(a=b)]", "[f(a=b)]", []),
    ("[f(a=float('nan'))]", "[f(a=float('nan'))]", []),
    ("[f(a=1), oops]", "[f(a=1), oops]", []),
    ("[f(s=']) \\' [')]", "", [("f", '{"s": "]) \' ["}')]),
    ("[f(a=1),]", "", [("f", '{"a": 1}')]),  # found by fuzzing both modes against each other
    ("[g\n.h(a=1), g . h(\nb='x'\n)]", "", [("g.h", '{"a": 1}'), ("g.h", '{"b": "x"}')]),
    ("[f(a=1),) x", "[f(a=1),) x", []),
    # a list without its `<|python_start|>` (the engine's `unwrapped`): the wrapper's other
    # half right after it is markup, as DSML's closer after an unwrapped invoke
    ("[f(a=1)] \n<|python_end|>done", "done", [("f", '{"a": 1}')]),
    ("[f(a=1)] text <|python_end|>", " text <|python_end|>", [("f", '{"a": 1}')]),
    ("x<|python_end|>", "x<|python_end|>", []),
])
def test_pythonic(text: str, content: str, calls: list[tuple[str, str]], mode: str) -> None:
    d = full(fmt="pythonic", text=text, tool_stream=mode)
    assert d.text == content
    assert [(c.name, c.arguments) for c in d.tool_calls or ()] == calls


@pytest.mark.parametrize("rows", [[k] for k in range(1, 9)] + [[1, 8, 3, 5, 2, 7, 4, 6]])
def test_pythonic_a_comment_between_two_calls_is_python_in_both_modes(rows: list[int]) -> None:
    """Issue 18 (SGLang #35564, streamed and one-shot results agree): a Python comment
    between two calls of the list, `[f(a=1) # c` newline `, g()]`. Python's `ast` (which
    SGLang's and vLLM's pythonic parsers run on the list) reads two calls, and so does
    whole mode; the incremental reader used to make the list malformed at the `#`. Over
    rows of 1-8 ids, both modes give the two calls, each call's concatenated fragments
    equal `parse_full`'s arguments, and the streamed result equals `parse_full`."""
    text = "[f(a=1) # c\n, g()]"
    info = marker_tokenizer()
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    assert info.tokenizer.decode(ids, skip_special_tokens=False) == text
    got = {}
    for mode in MODES:
        p = make_parsed_stream("", False, "pythonic", tool_stream=mode)
        deltas = decode_rows(info, ids, chunk(ids, rows), byte_level_table(info).kept, p, 0)
        check_call_deltas(deltas, mode)
        merged = merge(deltas)
        assert merged == p.parse_full(text)
        assert merged.text == ""
        assert [(c.name, c.arguments, c.malformed) for c in merged.tool_calls or ()] == \
            [("f", '{"a": 1}', False), ("g", "{}", False)]
        fragments: dict[int, str] = {}
        for d in deltas:
            for c in d.tool_calls or ():
                fragments[c.index] = fragments.get(c.index, "") + c.arguments
        assert fragments == {0: '{"a": 1}', 1: "{}"}
        got[mode] = merged
    assert got["incremental"] == got["whole"]


@pytest.mark.parametrize("text,content,calls", [
    ("[f(a=1), # c\n g()]", "", [("f", '{"a": 1}'), ("g", "{}")]),  # after the comma
    ("[f(a=1, # c\n b='x') # d\n]", "", [("f", '{"a": 1, "b": "x"}')]),  # between arguments
    ("[f(a=1), g() # c\n]", "", [("f", '{"a": 1}'), ("g", "{}")]),  # after the last call
    ("[f(a=1), # c\n]", "", [("f", '{"a": 1}')]),  # after a trailing comma
    ("[f(a='x # y', b=\"#\") # z\n, g(c=[1, # w\n 2])]", "",  # `#` in a string: not a comment
     [("f", '{"a": "x # y", "b": "#"}'), ("g", '{"c": [1, 2]}')]),
    ("[f(a=1) # it's ) ] }\n, g()]", "", [("f", '{"a": 1}'), ("g", "{}")]),  # brackets, quotes
    ("[f(a=1) # c\r, g()]", "", [("f", '{"a": 1}'), ("g", "{}")]),  # a CR ends a comment too
    ("[f(a=1) \\\n, g . # c\n h()]", "", [("f", '{"a": 1}'), ("g.h", "{}")]),
    ("[f(a=1) # c ]\n] end", " end", [("f", '{"a": 1}')]),  # the `]` in the comment is not the end
    ("[f(a=1)] # c\n", " # c", [("f", '{"a": 1}')]),  # after the list: content
    ("[ # c\nf(a=1)]", "[ # c\nf(a=1)]", []),  # before the first call: no list opens
    # other disagreements the extended property found on main: a value missing (`a=` read
    # as `()` by the incremental reader), a repeated keyword (Python's compiler rejects it;
    # `ast.parse` let whole mode keep the last), a later call's non-ASCII name (NFKC, as Python)
    ("[f(a= # c\n)]", "[f(a= # c\n)]", []),
    ("[f(b=1, b=2)]", "[f(b=1, b=2)]", []),
    ("[f(), \ufb01x(a=1)]", "", [("f", "{}"), ("fix", '{"a": 1}')]),
])
@pytest.mark.parametrize("mode", MODES)
def test_pythonic_comments(text: str, content: str, calls: list[tuple[str, str]],
                           mode: str) -> None:
    """Comments (and line continuations) wherever Python allows them once the list has
    opened: the same calls in both modes, stream == batch at every piece size."""
    d = full(fmt="pythonic", text=text, tool_stream=mode)
    assert (d.text, [(c.name, c.arguments) for c in d.tool_calls or ()]) == (content, calls)
    for k in range(1, 9):
        p = make_parsed_stream("", False, "pythonic", tool_stream=mode)
        out = [p.feed(text[i:i + k]) for i in range(0, len(text), k)] + [p.finish()]
        assert merge(out) == d
        check_call_deltas(out, mode)


def test_pythonic_a_later_bad_element_flags_the_sent_call_malformed() -> None:
    text = "[f(a=1), g(b=x)] after"
    p = make_parsed_stream(tool_parser="pythonic")
    deltas = [p.feed(ch) for ch in text] + [p.finish()]
    entries = [c for d in deltas for c in d.tool_calls or ()]
    assert entries[0] == ToolCallDelta(0, "f", "")
    # f's brace left when g started; g's `b=x` is not a literal: both are flagged
    assert "".join(c.arguments for c in entries if c.index == 0) == '{"a": 1}'
    assert [c.index for c in entries if c.malformed] == [0, 1]
    assert (merge(deltas).text, merge(deltas).tool_calls) == (text, None)


HARMONY_CALL = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
                "commentary to=functions.get_weather <|constrain|>json<|message|>"
                '{"city": "Paris"}<|call|>')


@pytest.mark.parametrize("mode", MODES)
def test_harmony_analysis_call_and_final(mode: str) -> None:
    d = full("gpt-oss", fmt="gpt-oss", text=HARMONY_CALL, tool_stream=mode)
    assert (d.reasoning, d.text) == ("Need weather.", "")
    assert calls_of(d) == [("get_weather", '{"city": "Paris"}', None)]
    text = ("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
            "<|message|>The answer.<|return|>")
    d = full("gpt-oss", fmt="gpt-oss", text=text, tool_stream=mode)
    assert (d.reasoning, d.text, d.tool_calls) == ("Think.", "The answer.", None)
    # the recipient in the role part, a preamble on commentary, no arguments
    text = ("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant "
            "to=functions.now<|channel|>commentary json<|message|><|call|>")
    d = full("gpt-oss", fmt="gpt-oss", text=text, tool_stream=mode)
    assert (d.text, calls_of(d)) == ("Let me check.", [("now", "{}", None)])


def test_harmony_without_one_of_its_parsers_keeps_that_part_as_written() -> None:
    d = full(fmt="gpt-oss", text=HARMONY_CALL)
    assert d.text == "<|channel|>analysis<|message|>Need weather.<|end|>" and d.tool_calls
    d = full("gpt-oss", text=HARMONY_CALL)
    assert d.reasoning == "Need weather." and d.tool_calls is None
    assert d.text == HARMONY_CALL[HARMONY_CALL.index("<|start|>"):]


@pytest.mark.parametrize("mode", MODES)
def test_harmony_malformed_unknown_and_builtin_calls_are_text(mode: str) -> None:
    for text in ['<|channel|>commentary to=functions.f <|constrain|>json<|message|>{bad}<|call|>',
                 "<|channel|>commentary to=browser.search<|message|>{}<|call|>"]:
        d = full("gpt-oss", fmt="gpt-oss", text=text, tool_stream=mode)
        assert (d.text, d.tool_calls) == (text, None)
    tools = [{"type": "function", "function": {"name": "ok"}}]
    d = full("gpt-oss", fmt="gpt-oss", text=HARMONY_CALL, tool_stream=mode, tools=tools)
    assert d.tool_calls is None and d.text.endswith('{"city": "Paris"}<|call|>')


def test_harmony_started_and_cut() -> None:
    d = full("gpt-oss", True, "gpt-oss", text="still thinking")
    assert (d.reasoning, d.text) == ("still thinking", "")
    text = '<|channel|>commentary to=functions.f<|message|>{"a": "x'
    p = make_parsed_stream("gpt-oss", False, "gpt-oss")
    d = merge([p.feed(text), p.finish()])
    assert d.tool_calls == [ToolCallDelta(0, "f", '{"a": "x', cut=True)]
    d = full("gpt-oss", False, "gpt-oss", text=text, tool_stream="whole")
    assert (d.text, d.tool_calls) == (text, None)


def test_harmony_pairs_only_with_itself() -> None:
    with pytest.raises(ParserError, match="gpt-oss pairs only"):
        make_parsed_stream("qwen3", False, "gpt-oss")
    with pytest.raises(ParserError, match="analysis channel"):
        make_reasoning_parser("gpt-oss")
    # the shard refuses the OPEN before any row
    table = RidTable(marker_tokenizer(), 0)
    out: Any = DeltasOut()
    table.on_open(Open("bad", reasoning_parser="gpt-oss", tool_parser="hermes"), out)
    table.on_open(Open("ok", reasoning_parser="gpt-oss", tool_parser="gpt-oss"), out)
    assert [(d.rid, d.error) for d in out] == [
        ("bad", "gpt-oss pairs only with gpt-oss (reasoning_parser and tool_parser)")]


def test_harmony_markers_are_kept_visible_with_skip_special() -> None:
    info = marker_tokenizer()
    p = make_parsed_stream("gpt-oss", False, "gpt-oss")
    keep = marker_token_ids(info, p.markers)
    assert keep == {info.tokenizer.token_to_id(m) for m in HARMONY}
    p = make_parsed_stream("kimi_k2", False, "kimi_k2")
    assert {info.tokenizer.token_to_id(m) for m in KIMI} <= marker_token_ids(info, p.markers)


def test_harmony_stop_strings_never_match_reasoning() -> None:
    text = ("<|channel|>analysis<|message|>STOP here<|end|><|channel|>final<|message|>a STOP b"
            "<|return|>")
    d = full("gpt-oss", fmt="gpt-oss", text=text, stop=["STOP"])
    assert (d.reasoning, d.text, d.stop) == ("STOP here", "a ", "STOP")


# ------------------------------------------------------------------ stream == batch on text
BITS = [*SPECIALS, "functions.f:0", "functions.g:1", "weird@id", "0", "analysis", "final",
        "commentary", " to=functions.f", " to=functions.g ", "assistant", "json",
        '{"name": "f", "parameters": {"a": "x;"}}', '{"name": "g", "arguments": {}}', ";", " ; ",
        "[", "]", "(", ")", "f(", "g(a=1", ", b='])'", ")]", "[f(a=[1, {'k': 'v'}])]", "'",
        '"', "\\", "{", "}", '{"a": [1, {"b": "ü"}]}', '{"s": "<|end|>"}', "<|", "<|tool",
        "<|ch", " ", "\n", "x", "END", "日本語", "👩‍👩‍👧‍👦", KIMI_TWO, HARMONY_CALL]
TOOLS = [{"type": "function", "function": {"name": n}} for n in ["f", "get_weather", "now"]]
PIPELINES = [("", "kimi_k2"), ("kimi_k2", "kimi_k2"), ("", "llama3_json"), ("", "pythonic"),
             ("gpt-oss", "gpt-oss"), ("gpt-oss", ""), ("", "gpt-oss")]


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.sampled_from(BITS), max_size=25),
       how=st.sampled_from(["bits", "chars", "cuts"]),
       cuts=st.lists(st.integers(0, 10_000), max_size=40), started=st.booleans(),
       stop=st.sampled_from([None, ["END"], ["\n\n", "x}"]]), typed=st.booleans())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reasoning,tools", PIPELINES)
def test_any_split_of_the_text_gives_the_batch_result(
        reasoning: str, tools: str, mode: str, parts: list[str], how: str, cuts: list[int],
        started: bool, stop: list[str] | None, typed: bool) -> None:
    text = "".join(parts)
    if how == "bits":
        cuts = [sum(map(len, parts[:i])) for i in range(len(parts))]
    elif how == "chars":
        cuts = list(range(len(text)))
    p = make_parsed_stream(reasoning, started and bool(reasoning), tools, stop=stop,
                           tool_stream=mode, tools=TOOLS if typed else None)
    out = [p.feed(piece) for piece in split_text(text, cuts)] + [p.finish()]
    assert merge(out) == p.parse_full(text)
    check_call_deltas(out, mode)


# ------------------------------------------------------------------ stream == batch on ids
ID_SETTINGS = settings(max_examples=40, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@ID_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["kimi_k2", "gpt-oss", "llama3_json", "pythonic"])
@pytest.mark.parametrize("wellformed", [True, False])
def test_marker_tokenizer_stream_equals_batch(fmt: str, wellformed: bool, mode: str,
                                              data: st.DataObject) -> None:
    info = marker_tokenizer()
    text, want_r, want_c, want_calls = data.draw(outputs(fmt, wellformed), label="out")
    reasoning = fmt if fmt in ("kimi_k2", "gpt-oss") else ""
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    skip = data.draw(st.booleans(), label="skip_special")
    p = make_parsed_stream(reasoning, False, fmt, tool_stream=mode)
    keep = marker_token_ids(info, p.markers)
    table = skip_table(info, keep) if skip else byte_level_table(info).kept
    assert table is not None
    sizes = data.draw(chunk_sizes, label="rows")
    deltas = decode_rows(info, ids, chunk(ids, sizes), table, p, 0)
    kept = [i for i in ids if not skip or i not in info.special_ids or i in keep]
    whole = info.tokenizer.decode(kept, skip_special_tokens=False)
    got = merge(deltas)
    assert got == p.parse_full(whole)
    check_call_deltas(deltas, mode)
    if wellformed and whole == text:
        assert (got.reasoning, got.text) == (want_r, want_c)
        assert [(c.name, json.loads(c.arguments), c.id) for c in got.tool_calls or ()] == \
            want_calls
        assert got.ended_with_tool_calls == bool(want_calls)


@pytest.mark.parametrize("text", [
    "[w(path='/tmp/a.py', content='def f():\\n\\treturn \"é\" \\\\ \\x41\\u00e9\\N{BULLET}\\101\\7z')]",
    "[w(n=1, s='a' 'b', t=\"x\", u=[1, 'y'], v={'k': (1, 2)}, e='', r=r'\\d', z='\\d')]",
    "[w(s='🙂日本語', n=-2.5e3, b=False), g(q=\"it's\")]",
])
def test_pythonic_streams_strings_and_both_modes_give_the_same_bytes(text: str) -> None:
    whole = full(fmt="pythonic", text=text, tool_stream="whole")
    assert whole.tool_calls and whole.text == ""
    for pieces in (list(text), [text]):
        p = make_parsed_stream(tool_parser="pythonic")
        got = merge([p.feed(x) for x in pieces] + [p.finish()])
        assert got == p.parse_full(text)
        assert [(c.name, c.arguments) for c in got.tool_calls or ()] == \
            [(c.name, c.arguments) for c in whole.tool_calls]


def test_pythonic_a_long_string_leaves_as_it_is_generated() -> None:
    p = make_parsed_stream(tool_parser="pythonic")
    d = p.feed("[write(path='/a', content='line one\\nline")
    assert "".join(c.arguments for c in d.tool_calls or ()) == \
        '{"path": "/a", "content": "line one\\nline'
    assert "".join(c.arguments for c in p.feed(" two')").tool_calls or ()) == ' two"'
    assert p.feed("]").tool_calls == [ToolCallDelta(0, None, "}")]  # the list ended
