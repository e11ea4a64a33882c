"""Reasoning and tool-call parsers: grammar examples, and stream == batch for every chunking.

Two kinds of property tests:
- on text: every split of marker-rich text into pieces (markers cut at any character);
- on ids: outputs built from a known structure (reasoning, content, calls with multilingual,
  emoji and code arguments, malformed calls, special tokens), encoded with the built-in
  DeepSeek-V4 tokenizer or a Qwen-style one whose markers are special added tokens, decoded
  by our incremental decoder in rows of every shape, with stop strings and min_tokens.
  The streamed result must equal `parse_full` of the full decode; for well-formed outputs
  `parse_full` must also give back the structure the output was built from.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from decoding import byte_decoding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parser_outputs import (
    TYPED,
    check_call_deltas,
    decode_rows,
    deepseek,
    glm_style,
    minimax_style,
    outputs,
    qwen_style,
    schema_of,
    split_text,
    stream_of,
)
from strategies import chunk, chunk_sizes

from sglang_tok.parsers import (
    MarkerSet,
    ParsedDelta,
    ParsedStream,
    ParserError,
    ToolCallDelta,
    make_parsed_stream,
    make_reasoning_parser,
    make_tool_parser,
    marker_token_ids,
    merge,
)
from sglang_tok.tokenizer import TokenizerInfo
from shards.byte_level.table import byte_level_table, skip_table

MODES = ["incremental", "whole"]


# ------------------------------------------------------------------ grammar examples
def full(reasoning: str = "", started: bool = False, tools: str = "", text: str = "",
         **kw: Any) -> ParsedDelta:
    return make_parsed_stream(reasoning, started, tools, **kw).parse_full(text)


def test_reasoning_block_is_split_off_and_tags_dropped() -> None:
    d = full("qwen3", text="\n<think>\nI think.</think>\n\nThe answer.")
    assert (d.reasoning, d.text) == ("\nI think.", "\n\nThe answer.")
    # the prompt already opened the block (R1 templates); a repeated opening tag is dropped
    d = full("deepseek-r1", True, text="<think>\nhmm</think>ok")
    assert (d.reasoning, d.text) == ("\nhmm", "ok")
    d = full("deepseek-r1", True, text="  still thinking")
    assert (d.reasoning, d.text) == ("  still thinking", "")


def test_without_a_block_everything_is_content() -> None:
    for text in ["Hello </think> there", "x<think>y</think>", "", "   ", "<thi", "<think"]:
        for name in ["qwen3", "deepseek-r1"]:
            d = full(name, text=text)
            assert (d.reasoning, d.text) == ("", text)


def test_partial_tags_are_held_then_released_into_their_channel() -> None:
    p = make_reasoning_parser("qwen3")
    assert p.feed("<thi").text == ""
    assert p.feed("nk>abc</th").reasoning == "abc"
    end = p.finish()
    assert (end.reasoning, end.text) == ("</th", "")
    p = make_reasoning_parser("qwen3")
    assert stream_of(p.feed("<thx")) == ("<thx", "", [], (None, False))


def test_qwen3_ends_reasoning_at_a_tool_call_and_r1_does_not() -> None:
    text = '<think>plan<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    d = full("qwen3", tools="hermes", text=text)
    assert (d.reasoning, d.text, d.ended_with_tool_calls) == ("plan", "", True)
    d = full("deepseek-r1", tools="hermes", text=text)
    assert d.reasoning == text[len("<think>"):] and d.tool_calls is None


CALL_EXAMPLES = [
    ("hermes", ('Sure.<tool_call>\n{"name": "get", "arguments": {"city": "東京"}}\n</tool_call>\n'
     '<tool_call>{"name": "g", "arguments": {}}</tool_call>\n'),
     "Sure.", [("get", '{"city": "東京"}'), ("g", "{}")]),
    ("deepseekv4", ('Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
     '<｜DSML｜parameter name="city" string="true">San Francisco</｜DSML｜parameter>\n'
     '<｜DSML｜parameter name="days" string="false">[1, 2]</｜DSML｜parameter>\n'
     '</｜DSML｜invoke>\n<｜DSML｜invoke name="run">\n{"code": "print(\\"🙂\\")\\n"}\n'
     '</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
     "Checking.\n\n", [("get_weather", '{"city": "San Francisco", "days": [1, 2]}'),
                       ("run", '{"code": "print(\\"🙂\\")\\n"}')]),
    ("deepseekv32", ('<｜DSML｜function_calls><｜DSML｜invoke name="f">\n</｜DSML｜invoke>'
     '</｜DSML｜function_calls>'), "", [("f", "{}")]),
    ("deepseekv3", ('x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n```json\n'
     '{"a": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>h<｜tool▁sep｜>{"b": "ü"}'
     '<｜tool▁call▁end｜><｜tool▁calls▁end｜>'), "x", [("get", '{"a": 1}'), ("h", '{"b": "ü"}')]),
    ("mistral", ('[TOOL_CALLS] [{"name": "f", "arguments": {"s": "]}\\"["}}, '
     '{"name": "g", "arguments": {}}]'), "", [("f", '{"s": "]}\\"["}'), ("g", "{}")]),
    ("mistral", 'ok[TOOL_CALLS]f[ARGS]{"a": [1]}[TOOL_CALLS]g[ARGS]{}', "ok",
     [("f", '{"a": [1]}'), ("g", "{}")]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt,text,content,calls", CALL_EXAMPLES)
def test_tool_calls_are_parsed(fmt: str, text: str, content: str,
                               calls: list[tuple[str, str]], mode: str) -> None:
    # the model wrote these arguments as `json.dumps` would: both modes give the same bytes
    d = full(tools=fmt, text=text, tool_stream=mode)
    assert d.text == content
    assert [(c.name, c.arguments) for c in d.tool_calls or ()] == calls
    assert [c.index for c in d.tool_calls or ()] == list(range(len(calls)))
    assert d.ended_with_tool_calls


MALFORMED = [
    ("hermes", 'a<tool_call>{"name": "f", "arguments": {bad}}</tool_call>b'),
    ("hermes", 'a<tool_call>{"arguments": {}}</tool_call>'),
    ("hermes", 'a<tool_call>{"name": "f", "arguments": [1]}</tool_call>'),
    ("hermes", 'a<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>'),
    ("hermes", 'unterminated <tool_call>{"name": "f'),
    # (a `string="false"` value that is not JSON is a string now: test_dsml_real_output.py)
    ("deepseekv4", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\ngarbage\n</｜DSML｜invoke>'),
    ("deepseekv4", "<｜DSML｜tool_calls>\nno calls at all\n</｜DSML｜tool_calls>\n"),
    ("deepseekv4", "<｜DSML｜tool_calls>\n"),
    ("deepseekv3", ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{oops"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")),
    ("mistral", "[TOOL_CALLS] Sure, here it is"),
    ("mistral", '[TOOL_CALLS] [{"name": "f"}, 3] and text'),
    ("mistral", "[TOOL_CALLS]f[ARGS]nope"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt,text", MALFORMED)
def test_malformed_calls_are_delivered_as_text_byte_for_byte(fmt: str, text: str,
                                                             mode: str) -> None:
    d = full(tools=fmt, text=text, tool_stream=mode)
    assert (d.text, d.tool_calls, d.ended_with_tool_calls) == (text, None, False)


def test_a_call_open_at_the_end_is_text_whole_and_stands_cut_incremental() -> None:
    text = 'unterminated <tool_call>{"name": "f", "arguments": {"a": "x'
    d = full(tools="hermes", text=text, tool_stream="whole")
    assert (d.text, d.tool_calls, d.ended_with_tool_calls) == (text, None, False)
    p = make_parsed_stream(tool_parser="hermes")
    deltas = [p.feed(text), p.finish()]
    assert deltas[1].tool_calls == [ToolCallDelta(0, cut=True)]
    d = merge(deltas)
    assert d.text == "unterminated " and d.ended_with_tool_calls
    assert d.tool_calls == [ToolCallDelta(0, "f", '{"a": "x', cut=True)]
    assert stream_of(d) == stream_of(p.parse_full(text))


def test_json_nested_beyond_any_depth_is_text_not_a_crash() -> None:
    deep = '{"name": "f", "arguments": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    for fmt, text in [("hermes", f"<tool_call>{deep}</tool_call>"),
                      ("mistral", f"[TOOL_CALLS] {deep}")]:
        d = full(tools=fmt, text=text)
        assert (d.text, d.tool_calls) == (text, None)


def test_a_bad_call_between_good_ones_keeps_its_text_and_the_good_ones_stay_calls() -> None:
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{x}</tool_call>\n'
            '<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    d = full(tools="hermes", text=text)
    assert d.text == "\n<tool_call>{x}</tool_call>"
    assert [c.name for c in d.tool_calls or ()] == ["a", "b"]


def test_stop_strings_apply_to_content_only() -> None:
    text = ('<think>STOP is fine here</think>pre <tool_call>{"name": "f", "arguments": '
            '{"q": "STOP"}}</tool_call> post STOP tail <tool_call>{"name": "g"}</tool_call>')
    d = full("qwen3", tools="hermes", text=text, stop=["STOP"])
    assert (d.reasoning, d.text, d.stop) == ("STOP is fine here", "pre  post ", "STOP")
    assert [c.name for c in d.tool_calls or ()] == ["f"] and d.ended_with_tool_calls
    d = full("qwen3", text=text, stop=["STOP"], include_stop_str=True)
    assert d.text == 'pre <tool_call>{"name": "f", "arguments": {"q": "STOP'
    # a tool call is a boundary no stop string spans
    d = full(tools="hermes", text='ab<tool_call>{"name": "f"}</tool_call>cd', stop=["bc"])
    assert d.stop is None and d.text == "abcd"


def test_min_tokens_exempts_the_first_ids_text_from_stop_matching() -> None:
    p = make_parsed_stream(stop=["ab"], min_tokens=3)
    assert p.feed("xab").text == "xab"
    p.exempt_end()
    d = merge([p.feed("b"), p.feed("abz"), p.finish()])
    assert (d.text, d.stop) == ("b", "ab")
    # a stop string straddling the boundary does not match either
    p = make_parsed_stream(stop=["ab"], min_tokens=1)
    p.feed("a")
    p.exempt_end()
    assert merge([p.feed("bc"), p.finish()]).text == "bc"


@pytest.mark.parametrize("min_tokens,stop", [(14, "e"), (15, None), (216, None)])
@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("started", [False, True])
def test_min_tokens_never_reached_exempts_the_text_a_malformed_call_gives_back(
        min_tokens: int, stop: str | None, skip: bool, started: bool) -> None:
    """Found by the qwen-style property (hermes, whole, rows of 1 id): an output shorter
    than min_tokens is exempt to its end, including the malformed call's text that
    `finish` gives back; at exactly min_tokens ids that text is matched (released after
    the exemption ended). Stream and batch reference agree in both cases."""
    info = qwen_style()
    text = "</think><tool_call>{badHello </think> "
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    assert len(ids) == 14
    p = make_parsed_stream("qwen3", started, "hermes", stop=["e"], min_tokens=min_tokens,
                           tool_stream="whole")
    keep = marker_token_ids(info, p.markers)
    table = skip_table(info, keep) if skip else byte_level_table(info).kept
    assert table is not None
    got = merge(decode_rows(info, ids, [[i] for i in ids], table, p, min_tokens))
    whole, want = batch_reference(info, ids, table, p, skip, keep, min_tokens)
    assert stream_of(got) == stream_of(want)
    assert got.stop == stop
    if stop is None:  # the call's text is content, unmatched (`e` is in "Hello")
        assert got.text == (whole.removeprefix("</think>") if started else whole)


def test_unknown_names_raise_a_clear_error() -> None:
    with pytest.raises(ParserError, match="unknown reasoning_parser 'nope'.*deepseek-r1"):
        make_reasoning_parser("nope")
    with pytest.raises(ParserError, match="unknown tool_parser 'x'.*hermes"):
        make_tool_parser("x")


def test_marker_set_holds_only_a_growing_marker_prefix() -> None:
    ms = MarkerSet(["<tool_call>", "</tool_call>"])
    assert ms.hold_from("abc<tool_ca") == 3
    assert ms.hold_from("abc<") == 3
    assert ms.hold_from("abc</tool_c") == 3
    assert ms.hold_from("abc<tx") == 6
    assert ms.hold_from("a<b<") == 3
    assert ms.find("x</tool_call><tool_call>") == (1, "</tool_call>")


def test_skip_special_keeps_marker_tokens_and_drops_other_specials_by_id() -> None:
    info = qwen_style()
    stream = make_parsed_stream("qwen3", False, "hermes")
    keep = marker_token_ids(info, stream.markers)
    ids_of = info.tokenizer.token_to_id
    assert keep == {ids_of(s) for s in ["<think>", "</think>", "<tool_call>", "</tool_call>"]}
    table = skip_table(info, keep)
    assert table is skip_table(info, keep)  # built once per tokenizer and marker set
    text = '<think>r</think>c<|im_end|><tool_call>{"name": "f"}</tool_call><|im_end|>'
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    assert ids_of("<|im_end|>") in ids
    push, flush = byte_decoding(table)  # type: ignore[arg-type]
    d = merge([stream.feed(push(ids) + flush()), stream.finish()])
    assert (d.reasoning, d.text, [c.name for c in d.tool_calls or ()]) == ("r", "c", ["f"])
    # the same text written with ordinary tokens is not a special token and is kept
    plain = [i for s in ["<", "|", "im", "_", "end", "|", ">"]
             for i in info.tokenizer.encode(s, add_special_tokens=False).ids]
    push, flush = byte_decoding(table)  # type: ignore[arg-type]
    assert push(plain) + flush() == "<|im_end|>"


# ------------------------------------------------------------------ stream == batch on text
MARKER_BITS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]",
               "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", '<｜DSML｜invoke name="f">',
               "</｜DSML｜invoke>", '<｜DSML｜parameter name="a" string="true">',
               '<｜DSML｜parameter name="b" string="false">', "</｜DSML｜parameter>",
               "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
               "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "function", "\n```json\n", "\n```",
               '{"name": "f", "arguments": {"x": "}]\\""}}', '{"a": [1, {"b": "ü"}]}', "[", "]",
               "{", "}", '"', "\\", "<", "</", "<thi", "<｜", " ", "\n", "  \n", "x", "END",
               "日本語", "👩‍👩‍👧‍👦", "def f(x):\n    return x", "<function=f>", "</function>",
               "<parameter=a>", "<parameter=n>", "</parameter>", "\n3\n", "<function=", ">",
               # hermes arrays of calls, with malformed siblings
               '<tool_call>[{"name": "f", "arguments": {"x": 1}}, {"name": "f", "arguments": '
               '{bad}, {"name": "f"}]</tool_call>', '[{"name": "f"}, "junk"]', ", ", ",",
               ', {"name": "f", "arguments": {bad}', '{"name": "g"}',
               *(text for _, text, _, _ in CALL_EXAMPLES), *(text for _, text in MALFORMED)]
bits = st.lists(st.sampled_from(MARKER_BITS), max_size=25)
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"},
                                     "x": {"type": ["object", "null"]}}}}}]
PIPELINES = [(r, s, t, m) for r in ["", "deepseek-r1", "qwen3"] for s in [False, True]
             for t in ["", "deepseekv3", "deepseekv32", "deepseekv4", "hermes", "mistral",
                       "qwen3_coder"]
             for m in (MODES if t else MODES[:1]) if r or not s]


@settings(max_examples=60, deadline=None)
@given(parts=bits, how=st.sampled_from(["bits", "chars", "cuts"]),
       cuts=st.lists(st.integers(0, 10_000), max_size=40),
       stop=st.sampled_from([None, ["END"], ["\n\n", "x}"]]), exempt=st.integers(0, 40),
       typed=st.booleans())
@pytest.mark.parametrize("reasoning,started,tools,mode", PIPELINES)
def test_any_split_of_the_text_gives_the_batch_result(reasoning: str, started: bool, tools: str,
                                                      mode: str, parts: list[str], how: str,
                                                      cuts: list[int], stop: list[str] | None,
                                                      exempt: int, typed: bool) -> None:
    check_text_split(reasoning, started, tools, mode, parts, how, cuts, stop, exempt, typed)


def check_text_split(reasoning: str, started: bool, tools: str, mode: str, parts: list[str],
                     how: str, cuts: list[int], stop: list[str] | None, exempt: int,
                     typed: bool) -> None:
    text = "".join(parts)
    if how == "bits":  # pieces end exactly at marker boundaries
        cuts = [sum(map(len, parts[:i])) for i in range(len(parts))]
    elif how == "chars":
        cuts = list(range(len(text)))
    exempt = min(exempt, len(text))
    p = make_parsed_stream(reasoning, started, tools, stop=stop, min_tokens=int(exempt > 0),
                           tool_stream=mode, tools=TOOLS if typed else None)
    out, at = [], 0
    for piece in split_text(text, [*cuts, exempt]):
        if at == exempt:
            p.exempt_end()
        out.append(p.feed(piece))
        at += len(piece)
    if at == exempt:
        p.exempt_end()
    out.append(p.finish())
    assert stream_of(merge(out)) == stream_of(p.parse_full(text, exempt))
    check_call_deltas(out, mode)
    if not (reasoning or tools or stop):
        assert merge(out).text == text


XML_EXAMPLES = [
    ("glm45", ("Sure.<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>東京 \"x\"\n</arg_value>\n"
               "<arg_key>n</arg_key>\n<arg_value> 3 </arg_value>\n</tool_call>\n"
               "<tool_call>f\n</tool_call>")),
    ("glm47", ("<tool_call>f<arg_key>a</arg_key><arg_value>  x</arg_value><arg_key>x</arg_key>"
               "<arg_value>{\"k\": [1]}</arg_value></tool_call><tool_call>f</tool_call>ok")),
    ("minimax_m2", ('<minimax:tool_call>\n<invoke name="f">\n<parameter name="a">\n\nline\n\n'
                    '</parameter>\n<parameter name="n">7</parameter>\n</invoke>\n'
                    '<invoke name="f">\n</invoke>\n</minimax:tool_call>')),
]
XML_BITS = [*MARKER_BITS, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "a", "n",
            "x", "f\n", "f", "\\n", "<minimax:tool_call>", "</minimax:tool_call>",
            '<invoke name="f">', "</invoke>", '<parameter name="a">', '<parameter name="n">',
            '<parameter name="x">', "\n\n", *(text for _, text in XML_EXAMPLES)]
XML_PIPELINES = [(r, s, t, m) for t, rs in [("glm45", ["", "glm45"]), ("glm47", ["", "glm45"]),
                                             ("minimax_m2", ["", "minimax"])]
                 for r in rs for s in [False, True] for m in MODES if r or not s]


@settings(max_examples=60, deadline=None)
@given(parts=st.lists(st.sampled_from(XML_BITS), max_size=25),
       how=st.sampled_from(["bits", "chars", "cuts"]),
       cuts=st.lists(st.integers(0, 10_000), max_size=40),
       stop=st.sampled_from([None, ["END"], ["\n\n", "x}"]]), exempt=st.integers(0, 40),
       typed=st.booleans())
@pytest.mark.parametrize("reasoning,started,tools,mode", XML_PIPELINES)
def test_any_split_of_xml_format_text_gives_the_batch_result(
        reasoning: str, started: bool, tools: str, mode: str, parts: list[str], how: str,
        cuts: list[int], stop: list[str] | None, exempt: int, typed: bool) -> None:
    """glm45, glm47, minimax_m2 (and their reasoning parsers) on marker-rich text."""
    check_text_split(reasoning, started, tools, mode, parts, how, cuts, stop, exempt, typed)


# ------------------------------------------------------------------ stream == batch on ids
def batch_reference(info: TokenizerInfo, ids: list[int], table: list[bytes], p: ParsedStream,
                    skip: bool, keep: frozenset[int], min_tokens: int) -> tuple[str, ParsedDelta]:
    """The full decode (same skip set), then `parse_full` on all of it."""
    kept = [i for i in ids if not skip or i not in info.special_ids or i in keep]
    whole = info.tokenizer.decode(kept, skip_special_tokens=False)
    if min_tokens > len(ids):  # never reached: the whole output, finish included, is exempt
        return whole, p.parse_full(whole, len(whole), min_tokens_reached=False)
    exempt = len(byte_decoding(table)[0](ids[:min_tokens])) if min_tokens else 0
    return whole, p.parse_full(whole, exempt)


def typed(calls: list[tuple[str, str]],
          tools: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The expected calls when `schema_of` typed a key by what was written: a string value
    the generator drew that is JSON text (`0`, `3.14`) has that key's non-string type."""
    props = tools[0]["function"]["parameters"]["properties"]
    out = []
    for name, arguments in calls:
        args = json.loads(arguments)
        for k, v in args.items():
            if isinstance(v, str) and props.get(k, {}).get("type") != "string":
                args[k] = json.loads(v)
        out.append((name, json.dumps(args, ensure_ascii=False)))
    return out


def check_ids(info: TokenizerInfo, data: st.DataObject, reasoning: str, started: bool,
              fmt: str, wellformed: bool, mode: str = "incremental") -> None:
    text, want_r, want_c, want_calls = data.draw(outputs(fmt, started, wellformed), label="out")
    tools = schema_of(text, fmt) if fmt in TYPED else None
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    skip = data.draw(st.booleans(), label="skip_special")
    stop = None if wellformed else data.draw(
        st.sampled_from([None, ["。"], ["\n\n", "world"], ["e"]]), label="stop")
    min_tokens = 0 if wellformed else data.draw(st.integers(0, len(ids) + 1), label="min_tokens")
    p = make_parsed_stream(reasoning, started, fmt, stop=stop, min_tokens=min_tokens,
                           tool_stream=mode, tools=tools)
    keep = marker_token_ids(info, p.markers)
    table = skip_table(info, keep) if skip else byte_level_table(info).kept
    assert table is not None
    shape = data.draw(st.sampled_from(["one", "all", "random"]), label="rows")
    sizes = {"one": [1], "all": [max(1, len(ids))]}.get(shape) or data.draw(chunk_sizes)
    deltas = decode_rows(info, ids, chunk(ids, sizes), table, p, min_tokens)
    whole, want = batch_reference(info, ids, table, p, skip, keep, min_tokens)
    got = merge(deltas)
    assert stream_of(got) == stream_of(want)
    check_call_deltas(deltas, mode)
    if wellformed and whole == text and (tools is not None or fmt not in TYPED):
        if tools is not None:  # a string value that reads as JSON ("0") was typed so
            want_calls = typed(want_calls, tools)
        assert (got.reasoning, got.text) == (want_r, want_c)
        calls = [(c.name, c.arguments) for c in got.tool_calls or ()]
        if mode == "whole" or fmt in (*TYPED, "deepseekv4") and '">\n{' not in text:
            assert calls == want_calls  # re-serialised (whole) or built from typed values
        else:  # the model's own JSON, passed through: the same values
            assert [(n, json.loads(a)) for n, a in calls] == [
                (n, json.loads(a)) for n, a in want_calls]
        assert got.ended_with_tool_calls == bool(want_calls)


ID_SETTINGS = settings(max_examples=40, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@ID_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["deepseekv4", "deepseekv3"])
@pytest.mark.parametrize("wellformed", [True, False])
def test_deepseek_v4_tokenizer_stream_equals_batch(fmt: str, wellformed: bool, mode: str,
                                                   data: st.DataObject) -> None:
    started = data.draw(st.booleans(), label="started")
    check_ids(deepseek(), data, "deepseek-r1", started, fmt, wellformed, mode)


@ID_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["hermes", "mistral", "qwen3_coder"])
@pytest.mark.parametrize("wellformed", [True, False])
def test_qwen_style_tokenizer_stream_equals_batch(fmt: str, wellformed: bool, mode: str,
                                                  data: st.DataObject) -> None:
    """Qwen's markers as special added tokens; qwen3_coder's `<function=` and `<parameter=`
    are ordinary text in Qwen3-Coder's vocabulary, as here."""
    started = data.draw(st.booleans(), label="started")
    check_ids(qwen_style(), data, "qwen3", started, fmt, wellformed, mode)


@ID_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["glm45", "glm47"])
@pytest.mark.parametrize("wellformed", [True, False])
def test_glm_style_tokenizer_stream_equals_batch(fmt: str, wellformed: bool, mode: str,
                                                 data: st.DataObject) -> None:
    """GLM-4.5/4.7's call and argument markers as special added tokens, as in theirs."""
    started = data.draw(st.booleans(), label="started")
    check_ids(glm_style(), data, "glm45", started, fmt, wellformed, mode)


@ID_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wellformed", [True, False])
def test_minimax_style_tokenizer_stream_equals_batch(wellformed: bool, mode: str,
                                                     data: st.DataObject) -> None:
    """MiniMax-M2: output starts in reasoning (`minimax` always does, as the template opens
    `<think>`); the section markers are special tokens, `<invoke`/`<parameter` text."""
    check_ids(minimax_style(), data, "minimax", True, "minimax_m2", wellformed, mode)
