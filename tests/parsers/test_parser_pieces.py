"""When a call's fragments leave, piece by piece, for the in-call shortcuts of the tool
engine (`ToolParser.absorb`, the readers' `fast`, `JsonEnd.skip`): each piece must release
exactly what `read` would, no later and no earlier, and the whole must equal `parse_full`."""

from __future__ import annotations

import json

import pytest

from sglang_tok.parsers import ParsedDelta, make_parsed_stream, merge
from sglang_tok.parsers.json_readers import JsonEnd, RawArgs

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("f", "search")]


def _feed(fmt: str, pieces: list[str]) -> list[ParsedDelta]:
    p = make_parsed_stream(tool_parser=fmt, tool_stream="incremental", tools=TOOLS)
    out = [p.feed(x) for x in pieces] + [p.finish()]
    ref = make_parsed_stream(tool_parser=fmt, tool_stream="incremental", tools=TOOLS)
    assert merge(out) == ref.parse_full("".join(pieces))
    return out


def _args(deltas: list[ParsedDelta]) -> str:
    return "".join(c.arguments for d in deltas for c in d.tool_calls or ())


def test_dsml_json_value_leaves_with_the_piece_that_closes_its_parameter() -> None:
    # the piece that completes `</｜DSML｜parameter>` holds no `<` (it is in the body's
    # tail): the value must still leave with it, not with a later piece
    head = '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="n" ' \
           'string="false">19</｜DSML｜param'
    out = _feed("deepseekv4", [head, "eter>", "\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"])
    assert _args(out[:2]) == '{"n": 19'


@pytest.mark.parametrize("fmt,shape", [
    ("hermes", '<tool_call>\n{{"name": "f", "arguments": {A}}}\n</tool_call>'),
    ("llama3_json", '<|python_tag|>{{"name": "f", "parameters": {A}}}'),
    ("mistral", "[TOOL_CALLS]f[ARGS]{A}"),
])
def test_json_escapes_cut_between_pieces_never_split_a_fragment(fmt: str, shape: str) -> None:
    # a tokenizer cuts `\\n` between its characters: the backslash waits for its escaped
    # character, whatever the cut, and code's `<` inside a string is argument text
    args = json.dumps({"code": 'a\\b\n"q" i < n\\', "x": ["\\", {"y": "\\\""}]})
    text = shape.replace("{A}", args).replace("{{", "{").replace("}}", "}")
    for cut in range(1, len(text)):
        for step in (1, 2, 3):
            pieces = [text[:cut]] + [text[i:i + step] for i in range(cut, len(text), step)]
            out = _feed(fmt, pieces)
            sent = ""
            for d in out:
                sent += "".join(c.arguments for c in d.tool_calls or ())
                assert len(sent) - len(sent.rstrip("\\")) in (0, 2, 4), (pieces, sent)
            assert sent == args


def test_json_end_escape_state_matches_a_whole_scan() -> None:
    text = '{"a": "x\\\\\\"y\\n", "b": [1, "]\\\\"], "c": {}}'
    whole = JsonEnd(0).end(text)
    for cut in range(1, len(text)):
        j = JsonEnd(0)
        first = j.end(text[:cut])
        if first >= 0:
            assert first == whole
            continue
        body = text[:cut]
        got = -1
        for i in range(cut, len(text)):  # the rest one character at a time, as `skip` takes it
            if not j.skip(len(body), text[i]):
                got = j.end(body + text[i])
                break
            body += text[i]
        assert got == whole, cut
    args = RawArgs(0)
    sent = "".join(args.fast(i, c) or args.read(text[:i + 1], i + 1)
                   for i, c in enumerate(text))
    assert sent + args.rest(text) == text


def test_pythonic_escapes_cut_anywhere_leave_decoded_once_complete() -> None:
    # repr() writes \t, \x07, \u200d (emoji joiners), \U..., \\ and \' : the shortcut
    # decodes those it can without `ast`, an incomplete one waits for the piece that
    # completes it, and the fragments are what the reader's own way gives
    value = "tab\there \x07 \U0001F468\u200d\U0001F469 it's \\ \U0010FFFF \ud7ff"
    text = f"[f(a={value!r}, b='x\\N{{BULLET}}y\\101')]"
    want = json.dumps({"a": value, "b": "x\u2022yA"}, ensure_ascii=False)
    for cut in range(1, len(text)):
        for step in (1, 2, 5):
            pieces = [text[:cut]] + [text[i:i + step] for i in range(cut, len(text), step)]
            out = _feed("pythonic", pieces)
            assert _args(out) == want
            sent = ""
            for d in out:
                sent += "".join(c.arguments for c in d.tool_calls or ())
                assert want.startswith(sent)
