"""The shard's row (`ParsedRequest.row`) against the parser fed piece by piece.

`ParsedRequest.row` takes shortcuts the parser's own `feed` does not (the plain route
with its inlined Markdown-quote update, the reasoning route, the in-call route straight
to `ToolParser.absorb`, the quick last row), and the stream == batch properties
(`test_parsers`, `test_parsers_kimi_llama_harmony`) feed the parser directly, so they
never run those. These hold each row's delta to what `feed` gives for the same piece, in
every format and both streaming modes, over the same outputs cut into rows of 1-8 ids.
"""

from __future__ import annotations

from typing import Any

import marker_outputs as mo
import parser_outputs as po
import pytest
from decoding import byte_decoding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import chunk, chunk_sizes

from sglang_tok.finish import Length
from sglang_tok.parsers import ParsedDelta, make_parsed_stream, marker_token_ids, merge
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo
from shards.byte_level.table import byte_level_table, skip_table
from shards.messages.request import ParsedRequest, make_request

MODES = ["incremental", "whole"]
# format -> (tokenizer, reasoning parser, output strategy's module)
SETUPS: dict[str, tuple[Any, str, Any]] = {
    "deepseekv4": (po.deepseek, "deepseek-r1", po),
    "deepseekv3": (po.deepseek, "deepseek-r1", po),
    "hermes": (po.qwen_style, "qwen3", po),
    "mistral": (po.qwen_style, "qwen3", po),
    "qwen3_coder": (po.qwen_style, "qwen3", po),
    "glm45": (po.glm_style, "glm45", po),
    "glm47": (po.glm_style, "glm45", po),
    "minimax_m2": (po.minimax_style, "minimax", po),
    "kimi_k2": (mo.marker_tokenizer, "kimi_k2", mo),
    "gpt-oss": (mo.marker_tokenizer, "gpt-oss", mo),
    "llama3_json": (mo.marker_tokenizer, "", mo),
    "pythonic": (mo.marker_tokenizer, "", mo),
}
ROW_SETTINGS = settings(max_examples=30, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def view(d: Delta | ParsedDelta) -> tuple[str, str, list[tuple[Any, ...]]]:
    return d.text, d.reasoning, [(c.index, c.name, c.arguments, c.malformed, c.cut, c.id)
                                 for c in d.tool_calls or ()]


def rows_against_feed(info: TokenizerInfo, fmt: str, reasoning: str, started: bool,
                      text: str, mode: str, tools: list[dict[str, Any]] | None,
                      skip: bool, sizes: list[int]) -> None:
    ids = info.tokenizer.encode(text, add_special_tokens=False).ids
    if not ids:
        return
    opts = Open("r", skip_special_tokens=skip, reasoning_parser=reasoning,
                reasoning_started=started, tool_parser=fmt, tool_stream=mode,
                tools=tools or [])
    req = make_request("r", info, opts)
    assert isinstance(req, ParsedRequest)
    ref = make_parsed_stream(reasoning, started, fmt, tool_stream=mode, tools=tools)
    keep = marker_token_ids(info, ref.markers)
    table = skip_table(info, keep) if skip else byte_level_table(info).kept
    assert table is not None
    push, flush = byte_decoding(table)
    rows = chunk(ids, sizes)
    for k, row in enumerate(rows):
        last = k == len(rows) - 1
        got = req.row(row, Length() if last else None, 1, 0, 0)
        assert got is not None
        if not last:
            assert view(got) == view(ref.feed(push(row))), (k, rows)
        else:
            want = merge([ref.feed(push(row)), ref.feed(flush()), ref.finish()])
            assert view(merge([ParsedDelta(got.text, got.reasoning, got.tool_calls)])) \
                == view(want)


@ROW_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", [f for f, s in SETUPS.items() if s[2] is po])
def test_rows_equal_feed_piece_by_piece(fmt: str, mode: str, data: st.DataObject) -> None:
    make_info, reasoning, _ = SETUPS[fmt]
    started = fmt == "minimax_m2" or data.draw(st.booleans(), label="started")
    wellformed = data.draw(st.booleans(), label="wellformed")
    text = data.draw(po.outputs(fmt, started, wellformed), label="out")[0]
    tools = po.schema_of(text, fmt) if fmt in po.TYPED else None
    rows_against_feed(make_info(), fmt, reasoning, started, text, mode, tools,
                      data.draw(st.booleans(), label="skip"), data.draw(chunk_sizes))


@ROW_SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", [f for f, s in SETUPS.items() if s[2] is mo])
def test_rows_equal_feed_piece_by_piece_kimi_llama_harmony(fmt: str, mode: str,
                                                          data: st.DataObject) -> None:
    make_info, reasoning, _ = SETUPS[fmt]
    wellformed = data.draw(st.booleans(), label="wellformed")
    text = data.draw(mo.outputs(fmt, wellformed), label="out")[0]
    rows_against_feed(make_info(), fmt, reasoning, False, text, mode, None,
                      data.draw(st.booleans(), label="skip"), data.draw(chunk_sizes))


DSML_CALL = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="search">\n<｜DSML｜parameter '
             'name="q" string="true">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
             '</｜DSML｜tool_calls>')


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("quote", ["```\n", "  ~~~\n", "`", "    "])
def test_dsml_quoted_in_markdown_across_rows(quote: str, size: int) -> None:
    """The row's plain route updates DSML's Markdown-quote state inline, line by line
    (`Quotes.feed`'s common case): a quoted call stays text, a later one is a call."""
    close = {"```\n": "\n```\n", "  ~~~\n": "\n  ~~~\n", "`": "`\n", "    ": "\n\n"}[quote]
    text = f"Use it like this:\n{quote}{DSML_CALL}{close}Now for real:\n{DSML_CALL}"
    for mode in MODES:
        rows_against_feed(po.deepseek(), "deepseekv4", "", False, text, mode, None, True,
                          [size])
