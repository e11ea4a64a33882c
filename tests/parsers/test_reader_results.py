"""The typed results between the tool engine's parts: a reader's events (`readers.Event`)
folded into whole calls (`readers.fold`), the one place they become call deltas
(`call_deltas.CallDeltas`), and what `ToolParser.absorb` gives the stream
(`tools.Absorbed`)."""

from __future__ import annotations

from sglang_tok.parsers import ToolCallDelta, make_tool_parser
from sglang_tok.parsers.call_deltas import CallDeltas
from sglang_tok.parsers.json_calls import HermesReader
from sglang_tok.parsers.readers import Call, Dropped, Event, Opened, fold
from sglang_tok.parsers.schema import tool_schemas
from sglang_tok.parsers.tools import NOTHING
from sglang_tok.parsers.types import Item

TOOLS = tool_schemas([{"type": "function", "function": {"name": n}} for n in ("f", "g")])


def test_fold_joins_each_calls_fragments_and_takes_out_a_dropped_named_call() -> None:
    events: list[Event] = ["ignored: no call yet", Opened("f"), '{"a"', ": 1}",
                           Opened("k", "functions.k:0"), "{}",
                           Opened("g"), '{"b": ', Dropped('{"name": "g", "b": x}', named=True),
                           Dropped("7"), "after a dropped element: no call", Opened("f")]
    assert fold(events) == [Call("f", '{"a": 1}'), Call("k", "{}", "functions.k:0"),
                            Dropped('{"name": "g", "b": x}', named=True), Dropped("7"),
                            Call("f", "")]


def test_take_sends_a_name_then_one_fragment_per_call_per_step() -> None:
    calls, out = CallDeltas(TOOLS), []
    assert calls.take([Opened("f", "id-1"), "{", '"a": 1', ""], out)
    assert out == [ToolCallDelta(0, "f", "", id="id-1"), ToolCallDelta(0, None, '{"a": 1')]
    assert calls.opened == [0]


def test_take_rejects_a_name_not_in_tools_before_sending_it() -> None:
    calls, out = CallDeltas(TOOLS), []
    assert not calls.take([Opened("h"), "{}"], out)
    assert out == [] and calls.rejected
    out2: list[Item] = []
    # a rejected body is text: its close flags nothing and delivers nothing
    assert not calls.close(HermesReader(TOOLS), '{"name": "h", "arguments": {}}', out2)
    assert out2 == [] and calls.delivered == 0 and not calls.rejected


def test_a_dropped_element_is_text_and_flags_its_sent_call() -> None:
    calls, out = CallDeltas(None), []
    calls.take([Opened("f"), "{", Dropped('{"name": "f", "x', named=True)], out)
    assert out == [ToolCallDelta(0, "f", ""), ToolCallDelta(0, None, "{"),
                   ToolCallDelta(0, malformed=True)]
    assert calls.dropped == '{"name": "f", "x' and calls.opened == []


def test_close_delivers_the_body_s_calls_with_its_dropped_text() -> None:
    body = '[{"name": "f", "arguments": {}}, 7]'
    calls, out = CallDeltas(TOOLS), []
    assert calls.close(HermesReader(TOOLS), body, out)
    assert out == [ToolCallDelta(0, "f", ""), ToolCallDelta(0, None, "{}"), "7"]
    assert calls.delivered == 1 and calls.opened == [] and calls.dropped == ""


def test_close_of_a_malformed_body_flags_the_calls_it_sent() -> None:
    calls, out = CallDeltas(None), []
    assert not calls.close(HermesReader(), '{"name": "f", "arguments": {"a": }}', out)
    assert out == [ToolCallDelta(0, "f", ""), ToolCallDelta(0, None, '{"a": '),
                   ToolCallDelta(0, malformed=True)]
    assert calls.count == 1 and calls.delivered == 0


def test_cut_lets_sent_calls_stand_flagged() -> None:
    calls, out = CallDeltas(None), []
    assert not calls.cut(out)  # nothing sent: the body is text
    calls.take([Opened("f"), "{"], out)
    assert calls.cut(out) and out[-1] == ToolCallDelta(0, cut=True) and calls.delivered == 1


def test_whole_sends_each_call_in_one_delta_or_none_of_them() -> None:
    calls, out = CallDeltas(TOOLS), []
    assert calls.whole([Call("f", "{}"), Dropped("x"), Call("g", '{"a": 1}', "7")], out)
    assert out == [ToolCallDelta(0, "f", "{}"), ToolCallDelta(1, "g", '{"a": 1}', id="7"),
                   "x"]
    assert not calls.whole([Call("f", "{}"), Call("h", "{}")], out)  # h: not in tools
    assert not calls.whole(None, out) and not calls.whole([Dropped("y")], out)
    assert len(out) == 3 and calls.delivered == 2 and calls.count == 2


def test_absorb_gives_a_fragment_delta_nothing_items_or_none() -> None:
    p = make_tool_parser("hermes")
    p.step('<tool_call>\n{"name": "f", "arguments": {"q": "')
    assert p.in_call
    assert p.absorb("abc") == ToolCallDelta(0, None, "abc")  # the common piece
    assert p.absorb("") is NOTHING
    # what may start the close marker is held; the piece that completes it: `step`'s
    assert p.absorb('x"}}</tool_') == ToolCallDelta(0, None, 'x"')  # (its brace held)
    assert p.absorb("call>") is None
    w = make_tool_parser("hermes", "whole")
    w.step('<tool_call>\n{"name": "f", "arguments": {"q": "')
    assert w.absorb("abc") is NOTHING  # whole mode: nothing of a call leaves before its end
    idle = make_tool_parser("hermes")
    assert idle.step("a <tool") == ["a "]  # a marker prefix held
    assert idle.absorb("_ca") is NOTHING  # still a prefix: held whole
    assert idle.absorb("ke>") == ["<tool_cake>"]  # no marker after all: content
