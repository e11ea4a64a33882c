"""Streaming reasoning and tool-call parsers: pure, process-free, per request.

API (everything a shard needs; each object is per request, the grammars are shared):

    make_reasoning_parser(name: str, started: bool | None = None) -> ReasoningParser
    make_tool_parser(name: str, tool_stream: str = "incremental",
                     tools: list | None = None) -> ToolParser
    make_parsed_stream(reasoning_parser: str = "", reasoning_started: bool | None = None,
                       tool_parser: str = "", stop: list[str] | None = None,
                       include_stop_str: bool = False, min_tokens: int = 0,
                       tool_stream: str = "incremental", tools: list | None = None)
    marker_token_ids(info, markers) -> frozenset[int]     # specials the parser must see
    ParsedStream.feed(text) -> ParsedDelta     # per decoded piece, in order
    ParsedStream.exempt_end() -> None          # after the text of the min_tokens-th id
    ParsedStream.finish() -> ParsedDelta       # once, at the end: the final flush, never skipped
    ParsedStream.parse_full(text, exempt_chars=0, min_tokens_reached=True) -> ParsedDelta
                                               # the batch reference (False: all exempt)
    ParsedDelta(text, reasoning, tool_calls: list[ToolCallDelta] | None, stop: str | None,
                ended_with_tool_calls: bool)
    ToolCallDelta(index, name | None, arguments, malformed, cut)
    merge(deltas) -> ParsedDelta     # what a client accumulates (malformed calls dropped)

A new tool-call format: see the docstring of tool_format.py (a module + a line in formats.py).

Unknown names raise `ParserError` (a ValueError) with the known names in the message.

Exactness (held by property tests): for every chunking of the same text, the concatenated
`text`, `reasoning` and each call's name and concatenated `arguments` of all `feed`s plus
`finish` equal `parse_full` of the whole text. Every decision depends only on the text so
far: a partial marker is held (only a suffix that could still grow into one), a call's
arguments leave only as far as they are certain (whole mode: once complete and valid),
and `finish` releases whatever is held.

Wiring into the shard (shards/messages/request.py), so that none of the usual bugs can happen:
1. OPEN gains `reasoning_parser` [""], `reasoning_started` [absent: the parser's default,
   `REASONING_STARTED`], `tool_parser` [""],
   `min_tokens` [0]. A request with a parser, or with `min_tokens` > 0, builds its
   ParsedStream once in `Request.__init__` (ParserError -> terminal error delta) and is
   not on the shard's inline fast path.
2. Markers reach the parser whatever `skip_special_tokens` says (SGLang #28489): with
   skip_special_tokens, decode with the family's table that keeps them (byte-level:
   shards/byte_level/table.py `keep_table(info, marker_token_ids(info, stream.markers))`
   instead of its table of skipped specials; window path: drop
   `info.special_ids - keep` instead of `info.special_ids`). Other special tokens are still
   dropped by id, as the full decode drops them; nothing is stripped by string matching.
   Both are cached per tokenizer and marker set, so this costs nothing per request.
3. The service's OPEN `stop` strings go to the ParsedStream, not to `Request.stops`: they
   then apply to content only, never to reasoning or inside a call (vLLM #14399, #52486).
   A delta with `stop` set is the request's last: finish `{"type": "stop", "matched":
   stop}`; ignore later rows. `include_stop_str_in_output` is applied by the stream.
4. Per row: `piece = decoder.push(ids)`; `delta = stream.feed(piece)`. With min_tokens,
   the row that holds the min_tokens-th id is pushed in two parts: feed the first part's
   text, call `exempt_end()`, then the rest (the exempt text depends on ids, not rows).
   On the last row (and on ERROR/ABORT): the decoder's flush text is fed, then
   `stream.finish()` is merged into the same delta: it releases held partial tags and open
   or malformed calls as text (smg #2203: the final flush is never skipped).
5. Delta gets `reasoning` [""], `tool_calls` [nil: list of ToolCallDelta maps],
   `ended_with_tool_calls` [false, on the last delta: report finish_reason "tool_calls"].
   `text` then holds content only; `ids` stay the row's ids, untouched (vLLM #51641: text
   is held, ids never are, and the concatenations are exact at the end).
   A scheduler-matched stop string (`matched: str`) is cut in `text` as before.
   `stream: false`: accumulate with `types.merge` and send once.
6. Attribution offsets index the raw decoded text; with a parser on, the shard should
   either refuse `attribution` or attribute against the raw text (not done here).
"""

from __future__ import annotations

from typing import Any

from .formats import FORMATS, REASONING_OF
from .harmony import HarmonyParser
from .markers import MarkerSet, marker_token_ids
from .readers import CallReader, Event
from .reasoning import ReasoningParser
from .schema import Schemas, tool_schemas
from .stream import ParsedStream
from .tool_format import ToolFormat
from .tools import TOOL_STREAMS, ToolParser
from .types import ParsedDelta, ParserError, ToolCallDelta, concat, merge, merge_calls

HARMONY = "gpt-oss"

# name -> a marker that also ends the block (stays in content for the tool parser)
REASONING_PARSERS: dict[str, str | None] = {
    "deepseek-r1": None, "deepseek-v4": "<｜DSML｜tool_calls>", "qwen3": "<tool_call>",
    "glm45": "<tool_call>", "minimax": None, "kimi_k2": "<|tool_calls_section_begin|>",
    HARMONY: None,  # not a `<think>` parser: Harmony's channels (harmony.py)
}
# name -> whether the output starts inside the block when OPEN does not say
# (`reasoning_started` absent): SGLang's `force_reasoning` defaults. R1-style templates end
# the prompt with `<think>`; a `<think>` the model repeats at the start is dropped anyway.
REASONING_STARTED: dict[str, bool] = {"deepseek-r1": True}
# parsers whose output always starts inside the block (SGLang forces it for these names:
# the template opens `<think>`), whatever `reasoning_started` says
STARTS_IN_REASONING = frozenset({"minimax"})
TOOL_PARSERS = FORMATS

__all__ = ["FORMATS", "REASONING_OF", "REASONING_PARSERS", "REASONING_STARTED",
           "STARTS_IN_REASONING", "TOOL_PARSERS", "TOOL_STREAMS",
           "CallReader", "Event", "MarkerSet", "ParsedDelta", "ParsedStream", "ParserError",
           "ReasoningParser", "Schemas", "ToolCallDelta", "ToolFormat", "ToolParser",
           "concat", "make_parsed_stream", "make_reasoning_parser", "make_tool_parser",
           "pairing_error", "marker_token_ids", "merge", "merge_calls", "tool_schemas"]


def pairing_error(reasoning_parser: str, tool_parser: str) -> str | None:
    """Why these two parsers cannot run together (checked at OPEN), or None."""
    if HARMONY in (reasoning_parser, tool_parser) and \
            {reasoning_parser, tool_parser} - {"", HARMONY}:
        return "gpt-oss pairs only with gpt-oss (reasoning_parser and tool_parser)"
    return None


def make_reasoning_parser(name: str, started: bool | None = None) -> ReasoningParser:
    """`started` None: the parser's default (`REASONING_STARTED`, else False)."""
    if name == HARMONY:
        raise ParserError("gpt-oss reasoning is Harmony's analysis channel: use "
                          "make_parsed_stream(reasoning_parser='gpt-oss')")
    if name not in REASONING_PARSERS:
        raise ParserError(f"unknown reasoning_parser {name!r}; known: "
                          f"{', '.join(sorted(REASONING_PARSERS))}")
    if started is None:
        started = REASONING_STARTED.get(name, False)
    return ReasoningParser(name, started or name in STARTS_IN_REASONING,
                           implicit_close=REASONING_PARSERS[name])


def make_tool_parser(name: str, tool_stream: str = "incremental",
                     tools: list[Any] | None = None) -> ToolParser:
    """`tools`: the request's OpenAI tool definitions; given (even []), a call to a name
    not among them is text. None: any name is a call, and every value is a string."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ParserError(f"unknown tool_parser {name!r}; known: {', '.join(sorted(FORMATS))}")
    if tool_stream not in TOOL_STREAMS:
        raise ParserError(f"unknown tool_stream {tool_stream!r}; known: "
                          f"{', '.join(TOOL_STREAMS)}")
    make = fmt.parser or ToolParser
    return make(fmt, tool_stream, None if tools is None else tool_schemas(tools))  # type: ignore[no-any-return]


def make_parsed_stream(reasoning_parser: str = "", reasoning_started: bool | None = None,
                       tool_parser: str = "", stop: list[str] | None = None,
                       include_stop_str: bool = False, min_tokens: int = 0,
                       tool_stream: str = "incremental",
                       tools: list[Any] | None = None) -> ParsedStream:
    if HARMONY in (reasoning_parser, tool_parser):
        # one parser frames Harmony's channels: reasoning, content and calls together
        problem = pairing_error(reasoning_parser, tool_parser)
        if problem:
            raise ParserError(problem)
        if tool_stream not in TOOL_STREAMS:
            raise ParserError(f"unknown tool_stream {tool_stream!r}; known: "
                              f"{', '.join(TOOL_STREAMS)}")
        harmony = HarmonyParser(FORMATS[HARMONY], tool_stream,
                                None if tools is None else tool_schemas(tools),
                                reasoning=reasoning_parser == HARMONY,
                                calls=tool_parser == HARMONY,
                                started=bool(reasoning_started))
        return ParsedStream(None, harmony, stop, include_stop_str, min_tokens)
    reasoning = make_reasoning_parser(reasoning_parser, reasoning_started) \
        if reasoning_parser else None
    tools_ = make_tool_parser(tool_parser, tool_stream, tools) if tool_parser else None
    return ParsedStream(reasoning, tools_, stop, include_stop_str, min_tokens)
