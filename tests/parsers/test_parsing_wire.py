"""Issue 11 wiring without processes: ParsedRequest per row, OPEN/Delta/COLUMNS fields.

The reference for every streamed result is `ParsedStream.parse_full` of the full decode
of the same ids (with the same kept markers), exactly what a batch parser would return.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from parsing_cases import (
    DS,
    DS_OUTPUT,
    QWEN_OUTPUT,
    QWEN_SPECIALS,
    channels,
    enc,
    qwen_style,
    ref_channels,
    reference,
)
from strategies import chunk, chunk_sizes

from sglang_tok.finish import ABORT, Finish, Length, Stop
from sglang_tok.protocols.model import columns, control, output
from sglang_tok.protocols.model import deltas as native_deltas
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta, ToolCallDelta
from sglang_tok.tokenizer import TokenizerInfo, no_tokenizer
from sglang_tok_testkit import zoo
from shards.byte_level.table import byte_level_table
from shards.messages.request import ParsedRequest, Request, make_request, refusal


def run(info: TokenizerInfo, opts: Open, rows: list[list[int]],
        finish: Finish | None = None) -> list[Delta]:
    assert refusal(opts, info) is None
    req = make_request(opts.rid, info, opts)
    out = []
    for n, row in enumerate(rows):
        d = req.row(row, (finish or Length()) if n == len(rows) - 1 else None, 3, 0, 0)
        if d is not None:
            out.append(d)
            if d.finish is not None:
                break
    return out


# ------------------------------------------------------------------ Request level
@settings(max_examples=80, deadline=None)
@given(sizes=chunk_sizes, stream=st.booleans(), min_tokens=st.integers(0, 40),
       stop=st.sampled_from([[], ["now"], ["東京"], ["weather", "ing"], ["call", "Sure"]]),
       qwen=st.booleans(), skip=st.booleans())
def test_any_rows_equal_parse_full(sizes: list[int], stream: bool, min_tokens: int,
                                   stop: list[str], qwen: bool, skip: bool) -> None:
    """DeepSeek-V4 ids (DSML calls, markers are ordinary tokens) and Qwen-style ids (markers
    are special tokens), rows of any sizes, with stop strings, min_tokens, stream=false."""
    info = qwen_style() if qwen else DS
    ids = enc(info, QWEN_OUTPUT if qwen else DS_OUTPUT)
    names = ("qwen3", "hermes") if qwen else ("deepseek-r1", "deepseekv4")
    opts = Open("r", reasoning_parser=names[0], tool_parser=names[1], stream=stream,
                stop=stop, min_tokens=min_tokens, skip_special_tokens=skip)
    deltas = run(info, opts, chunk(ids, sizes))
    want = reference(info, opts, ids)
    assert channels(deltas) == ref_channels(want)
    if want.stop is not None:
        assert deltas[-1].finish == (Stop(want.stop, tool_calls=True)
                                     if want.ended_with_tool_calls else Stop(want.stop))
    if not stream:
        assert len(deltas) == 1
    assert [i for d in deltas for i in d.ids] == ids[:len([i for d in deltas for i in d.ids])]


def test_deepseek_v4_one_and_four_ids_per_row_give_the_calls() -> None:
    ids = enc(DS, DS_OUTPUT)
    opts = Open("r", reasoning_parser="deepseek-r1", tool_parser="deepseekv4")
    for size in (1, 4):
        deltas = run(DS, opts, chunk(ids, [size]))
        text, reasoning, calls, ended = channels(deltas)
        assert reasoning.startswith("\n先想一想") and text == "\n\nChecking now.\n\n"
        assert [(c[1], c[2]) for c in calls] == [
            ("get_weather", '{"city": "東京 🙂", "days": [1, 2]}'),
            ("run", '{"code": "def f(x):\\n    return x  # 值"}')]
        assert ended and deltas[-1].finish == Length(tool_calls=True)
        assert [i for d in deltas for i in d.ids] == ids  # ids are never held


def test_markers_that_are_special_tokens_reach_the_parser_with_skip_special() -> None:
    info = qwen_style()
    ids = enc(info, QWEN_OUTPUT)
    assert all(i in info.special_ids for i in enc(info, "<think></think><tool_call>"))
    opts = Open("r", reasoning_parser="qwen3", tool_parser="hermes")
    text, reasoning, calls, ended = channels(run(info, opts, chunk(ids, [1])))
    # <|im_end|> is special and no marker: still dropped by id
    assert (text, reasoning, ended) == ("Sure.", "plan: call f", True)
    assert calls == [(0, "f", '{"q": "日本語 👍🏽"}')]
    # a plain request still drops every special
    plain = Request("p", info, Open("p"))
    assert plain.row(ids, Length(), 0, 0, 0).text == (  # type: ignore[union-attr]
        'plan: call fSure.\n{"name": "f", "arguments": {"q": "日本語 👍🏽"}}\n')


def test_stop_strings_apply_to_content_not_reasoning() -> None:
    ids = enc(DS, DS_OUTPUT)
    opts = Open("r", reasoning_parser="deepseek-r1", stop=["東京", "now"])
    deltas = run(DS, opts, chunk(ids, [2]))
    text, reasoning, _, _ = channels(deltas)
    assert "東京" in reasoning and text == "\n\nChecking "
    assert deltas[-1].finish == Stop("now")


def test_min_tokens_exempts_the_first_ids_whatever_the_rows() -> None:
    ids = enc(DS, "ab STOP cd STOP ef")
    k = len(enc(DS, "ab STOP"))
    for size in (1, 3, len(ids)):
        deltas = run(DS, Open("r", stop=["STOP"], min_tokens=k), chunk(ids, [size]))
        assert "".join(d.text for d in deltas) == "ab STOP cd "
        assert deltas[-1].finish == Stop("STOP")
        deltas = run(DS, Open("r", stop=["STOP"], min_tokens=1), chunk(ids, [size]))
        assert "".join(d.text for d in deltas) == "ab "


def test_abort_runs_the_final_flush() -> None:
    ids = enc(DS, "<think>a</think>x <｜DSML｜tool_ca")
    req = make_request("r", DS, Open("r", reasoning_parser="deepseek-r1",
                                     tool_parser="deepseekv4"))
    d = req.row(ids, None, 0, 0, 0)
    assert d is not None and d.reasoning == "a" and d.text == "x "
    end = req.end(ABORT, "gone")
    assert (end.text, end.error, end.finish) == ("<｜DSML｜tool_ca", "gone", ABORT)
    assert end.usage is not None


def test_stream_false_equals_stream_true_concatenated() -> None:
    info = qwen_style()
    ids = enc(info, QWEN_OUTPUT)
    opts = Open("r", reasoning_parser="qwen3", tool_parser="hermes")
    streamed = run(info, opts, chunk(ids, [3]))
    once = run(info, Open("r", reasoning_parser="qwen3", tool_parser="hermes", stream=False),
               chunk(ids, [3]))
    assert len(once) == 1 and channels(once) == channels(streamed)
    assert once[0].ids == ids


def test_scheduler_matched_stop_string_still_cut_in_text() -> None:
    ids = enc(DS, "<think>r</think>hello END")
    deltas = run(DS, Open("r", reasoning_parser="deepseek-r1"), chunk(ids, [1]),
                 Stop(" END"))
    assert channels(deltas)[:2] == ("hello", "r")


def test_refusals_name_the_bad_option() -> None:
    bad = refusal(Open("r", reasoning_parser="nope"), DS)
    assert bad is not None and "reasoning_parser 'nope'" in bad and "qwen3" in bad
    bad = refusal(Open("r", tool_parser="x"), DS)
    assert bad is not None and "tool_parser 'x'" in bad and "deepseekv4" in bad
    assert refusal(Open("r", tool_parser="hermes", attribution=True), DS) is not None
    assert refusal(Open("r", attribution=True, stop=["x"]), DS) is None
    assert refusal(Open("r", tool_parser="hermes", min_tokens=3), DS) is None
    none = no_tokenizer()
    for kw in ({"stop": ["x"]}, {"logprob_text": True}, {"attribution": True},
               {"reasoning_parser": "qwen3"}, {"tool_parser": "hermes"}):
        why = refusal(Open("r", **kw), none)
        assert why is not None and "--tokenizer none" in why and next(iter(kw)) in why
    assert refusal(Open("r", min_tokens=4, stream=False), none) is None
    assert isinstance(make_request("r", DS, Open("r", min_tokens=1)), ParsedRequest)
    assert type(make_request("r", DS, Open("r", stop=["x"]))) is Request


def test_no_tokenizer_request_carries_ids_and_usage_only() -> None:
    none = no_tokenizer()
    req = make_request("r", none, Open("r", prompt_ids=[5, 6]))
    d1 = req.row([1, 2**40, -3], None, 2, 0, 0)
    d2 = req.row([7], Stop(7), 2, 0, 0)
    assert d1 is not None and d2 is not None
    assert (d1.text, d1.ids, d2.text, d2.ids) == ("", [1, 2**40, -3], "", [7])
    assert d2.usage is not None and d2.usage.completion_tokens == 4


# ------------------------------------------------------------------ wire
def test_delta_without_parser_fields_keeps_its_bytes() -> None:
    """The DELTAS bytes of a request without parsers are what they were before issue 11.

    msgspec writes a struct's map header for its field count: past 15 fields a fixmap
    becomes map16 and every delta's bytes change, whatever omit_defaults leaves out.
    """
    assert len(Delta.__struct_fields__) <= 15
    d = Delta("rid-1", "héllo", [1, 2], finish=Stop(2),
              usage=native_deltas.Usage(1, 2, 3, 0, 0))
    raw = native_deltas.encode_deltas(native_deltas.Deltas(0, 7, [d, Delta("r2", "x", [3])]))
    assert raw.hex() == (
        "4483a5736861726400a373657107a664656c7461739285a3726964a57269642d31a474657874a668c3a9"
        "6c6c6fa3696473920102a666696e69736882a474797065a473746f70a76d61746368656402a575736167"
        "6585ad70726f6d70745f746f6b656e7301b1636f6d706c6574696f6e5f746f6b656e7302ac746f74616c"
        "5f746f6b656e7303ad6361636865645f746f6b656e7300b0726561736f6e696e675f746f6b656e730083"
        "a3726964a27232a474657874a178a36964739103")


def test_parser_fields_round_trip_in_deltas_and_columns() -> None:
    calls = [ToolCallDelta(0, "f", '{"a": "東京"}'), ToolCallDelta(1, None, "}")]
    deltas = [Delta("a", "x", [1], reasoning="think 🙂"), Delta("b", "", [2, 3]),
              Delta("a", "", [4], tool_calls=calls,
                    finish=Stop(4, tool_calls=True)),
              Delta("c", "y", [], reasoning="")]
    back = output.decode_output(native_deltas.encode_deltas(native_deltas.Deltas(1, 2, deltas)))
    assert isinstance(back, native_deltas.Deltas) and back.deltas == deltas
    for fmt in ("columnar", "deltas"):
        raw = output.encode_output(fmt, 1, 2, deltas)
        msg = output.decode_output(raw)
        assert isinstance(msg, (columns.Columns, native_deltas.Deltas))
        assert msg.deltas == deltas
    cols = columns.columns_of(1, 2, deltas)
    assert cols.reasoning == [(0, "think 🙂")]
    assert cols.tool_calls == [(2, calls)]
    # without parser fields the COLUMNS bytes end where they did (no trailing columns)
    plain = columns.encode_columns(columns.columns_of(0, 0, [Delta("a", "x", [1])]))
    assert msgspec.msgpack.decode(plain[1:]) == [0, 0, ["a"], ["x"], [1], [1]]


def test_open_fields_default_and_decode() -> None:
    o = control.decode_control(b"\x4f" + msgspec.msgpack.encode(
        {"rid": "r", "reasoning_parser": "qwen3", "reasoning_started": True,
         "tool_parser": "hermes", "min_tokens": 5, "future": 1}))
    assert isinstance(o, Open)
    assert (o.reasoning_parser, o.reasoning_started, o.tool_parser, o.min_tokens) == (
        "qwen3", True, "hermes", 5)
    d = Open("r")
    assert (d.reasoning_parser, d.reasoning_started, d.tool_parser, d.min_tokens) == (
        "", None, "", 0)  # reasoning_started absent: the parser's default
    for said in (False, True):  # a frame that says it keeps its meaning
        o = control.decode_control(b"\x4f" + msgspec.msgpack.encode(
            {"rid": "r", "reasoning_parser": "deepseek-r1", "reasoning_started": said}))
        assert isinstance(o, Open) and o.reasoning_started is said


@pytest.mark.parametrize("skip", [True, False])
def test_window_path_keeps_markers(skip: bool) -> None:
    """A non-byte-level tokenizer (window path) drops `special_ids - keep`."""
    info = zoo.with_markers(tuple(QWEN_SPECIALS), "window", "metaspace_byte_fallback_bpe")
    assert byte_level_table(info) is None
    text = "<think>hmm</think>ok<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
    ids = enc(info, text)
    opts = Open("r", reasoning_parser="qwen3", tool_parser="hermes", skip_special_tokens=skip)
    got = channels(run(info, opts, chunk(ids, [1])))
    assert got == ref_channels(reference(info, opts, ids))
    assert got[1].strip() == "hmm" and [c[1] for c in got[2]] == ["f"]
