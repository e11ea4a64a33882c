"""The per-row path: a request's own rules and the delta it emits per row (section 5).

A request whose options need per-request Python state (service stop strings, parsers,
`stream: false`, attribution the array path does not track, a tokenizer without an array
decoder) keeps a `Request` in its slot. Its rows are decoded by the shard's decoder on the
slot's own state (`RowDecoder.push`), as the array path decodes plain rows; the common row
(streaming, no service stop strings, no attribution) costs one push and one Delta, and
everything else is paid only by the requests that asked for it. Built without a shard's
slots, a request takes a one-slot state of its own (tests, and an OPENed rid that ends
before its first row).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

from sglang_tok.finish import Finish, Stop, with_tool_calls
from sglang_tok.parsers import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    TOOL_STREAMS,
    ParsedDelta,
    ParsedStream,
    concat,
    make_parsed_stream,
    marker_token_ids,
    merge_calls,
    pairing_error,
)
from sglang_tok.protocols.model.control import DEFAULT_OPEN_FIELDS, Open
from sglang_tok.protocols.model.deltas import Delta, Usage
from sglang_tok.stops import StopMatcher
from sglang_tok.tokenizer import NO_TOKENIZER, TokenizerInfo

from ..decoders import decoders_for
from ..decoding.attribution import Attributor
from ..decoding.interface import Decoded, RowDecoder, row_in_vocab
from ..decoding.slots import Slots
from ..ending.assembly import Between, LastRow, end_rows
from ..ending.rules import SENT_TAIL, trims_stop_token, usage

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_EMPTY = repeat("")  # map(dict.get, ids, _EMPTY): "" for an id without text


def logprob_texts(info: TokenizerInfo, logprobs: list[Any] | None, top: list[Any] | None
                  ) -> tuple[list[str] | None, list[Any] | None]:
    """`logprob_text`: the text of each logprob id of a row (`logprobs` as [value, id],
    `top` as [[id, value], ...] or None per position), looked up with map() over the ids:
    C speed per id. Both paths (per row, array) use this."""
    get = info.token_texts.get
    texts = None if logprobs is None else list(map(get, map(_SECOND, logprobs), _EMPTY))
    top_texts = None if top is None else \
        [None if pos is None else list(map(get, map(_FIRST, pos), _EMPTY)) for pos in top]
    return texts, top_texts


class Request:
    __slots__ = ("rid", "opts", "info", "decoder", "state", "slot", "keep", "stops", "attr",
                 "completion", "prompt_tokens", "cached_tokens", "reasoning_tokens", "sent",
                 "tail", "acc")

    def __init__(self, rid: str, info: TokenizerInfo, opts: Open | None = None,
                 decoder: RowDecoder | None = None, state: Slots | None = None,
                 slot: int | None = 0, keep: frozenset[int] = frozenset()) -> None:
        """`decoder` and `state`: the shard's, which its table hands it (else its
        tokenizer's reference decoder, whose per-row methods are every implementation's,
        and a one-slot state of its own); `slot`: where it decodes (None: not yet,
        `take_slot` later); `keep`: specials a parser must see although the request skips
        specials."""
        opts = opts or DEFAULT_OPEN_FIELDS
        self.rid = rid
        self.opts = opts
        self.info = info
        self.decoder = decoder if decoder is not None else \
            decoders_for(info, vectorised=False).per_row
        self.state = state if state is not None else Slots(1)
        self.keep = keep
        self.slot = -1
        self.stops = self._stop_matcher(opts)
        self.attr: Attributor | None = None
        if slot is not None:
            self.take_slot(slot)
        self.completion = 0
        self.prompt_tokens = self.cached_tokens = self.reasoning_tokens = 0
        self.sent = 0  # characters of text released so far
        self.tail = ""  # the last SENT_TAIL of them, for a scheduler-matched stop's cut
        # stream=False: everything accumulates into the one last delta
        self.acc: Delta | None = None if opts.stream else Delta(rid, "", [])

    def _stop_matcher(self, opts: Open) -> StopMatcher | None:
        """The OPEN's stop strings, matched on the text (a parser's request matches them in
        its content instead)."""
        return StopMatcher(opts.stop) if opts.stop else None

    def take_slot(self, slot: int) -> None:
        """Bind the request's decoder state, after its prompt, to `slot` of its state."""
        self.slot = slot
        self.state.bind_row(slot, self.rid, self.decoder.start(self.opts, self.keep))
        if self.opts.attribution:
            self.attr = self.decoder.attributor(self.state, slot)

    def alone(self) -> Request:
        """The request with a one-slot state of its own, if it has no slot yet."""
        if self.slot < 0:
            self.state = Slots(1)
            self.take_slot(0)
        return self

    # ------------------------------------------------------------------ rows
    def row(self, ids: list[int], finish: Finish | None, prompt_tokens: int,
            cached_tokens: int, reasoning_tokens: int, logprobs: list[Any] | None = None,
            top: list[Any] | None = None, tid_lp: list[Any] | None = None) -> Delta | None:
        """Consume one BATCH row (ids as sent: any int); return its delta (None for a
        non-final non-stream row)."""
        self.completion += len(ids)
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens
        if finish is None:  # the common row: no trimming, no flush
            text = self._push(ids)
            if self.stops is not None:
                text, finish = self._apply_stops(text, False)
            return self._emit(text, ids, finish, logprobs, top, tid_lp)
        decode_ids, stop = self._cut_stop(ids, finish)
        text = self._push(decode_ids)
        between = self._final_stops if self.stops is not None else None
        end = self._last(text, finish, stop, between)
        return self._emit(end.text, ids, end.row.finish, logprobs, top, tid_lp, end.row.usage)

    def end(self, finish: Finish, error: str | None = None) -> Delta:
        """ERROR/ABORT: what is held comes out, and the request closes with `finish`."""
        between = self._final_stops if self.stops is not None else None
        end = self._last("", finish, None, between, control=True)
        delta = self._emit(end.text, [], finish, None, None, None, end.row.usage)
        assert delta is not None
        delta.error = error
        return delta

    # ------------------------------------------------------------------ pieces
    def _push(self, ids: list[int]) -> str:
        """One row's ids through the slot's decoder, attributed where the request asked.
        `push` takes any int (it maps what is outside the vocabulary); an attribution names
        the id the decoder saw (`vocab_size` for one outside, protocol section 10), so the
        attributed ids are mapped here, once."""
        attr = self.attr
        if attr is None:
            return self.decoder.push(self.state, self.slot, ids)
        return self.decoder.push_attributed(self.state, self.slot,
                                            row_in_vocab(ids, self.info.vocab_size), attr)

    def _cut_stop(self, ids: list[int], finish: Finish) -> tuple[list[int], int | None]:
        """The last row's ids to decode and the scheduler's stop token left out of them (a
        stop token is never text, unless no_stop_trim)."""
        if trims_stop_token(finish, self.opts.no_stop_trim, ids):
            return ids[:-1], ids[-1]
        return ids, None

    def _sent_text(self, text: str) -> None:
        """Count text released to the client, keeping its tail for a later cut."""
        self.sent += len(text)
        t = self.tail + text
        self.tail = t if len(t) <= SENT_TAIL else t[-SENT_TAIL:]

    def _last(self, text: str, finish: Finish, stop: int | None,
              between: Between | None, control: bool = False) -> _Ended:
        """The last row's text (`stop`: its stop token, left out) through the end rules
        (ending.end_rows), as the array path's last rows go."""
        acc = self.acc
        row = LastRow(0, self.slot, finish, (self.prompt_tokens, self.completion,
                                             self.cached_tokens, self.reasoning_tokens),
                      stop, self.opts.no_stop_trim, control, self.attr, self.sent,
                      (self.tail,) if acc is None else (acc.text,), acc is not None, between,
                      self.opts.no_stop_trim and self.opts.trim_after_stop is True)
        decoded = Decoded([text])
        end_rows(self.decoder, self.state, decoded, [row])
        if row.taken_back:  # stream=false: the cut reached into the text accumulated
            assert acc is not None
            acc.text = acc.text[:len(acc.text) - row.taken_back]
            self.sent -= row.taken_back
        return _Ended(decoded.text_of(0), row)

    def _final_stops(self, text: str, flushed: str) -> tuple[str, Finish | None]:
        return self._apply_stops(text + flushed, True)

    def _apply_stops(self, text: str, final: bool) -> tuple[str, Finish | None]:
        stops = self.stops
        if stops is None:
            return text, None
        out, cut, matched = stops.feed(text, final)
        if matched is None:
            return out, None
        if self.opts.include_stop_str_in_output:
            out += matched
        if self.attr is not None:
            self.attr.end()
            self.attr.cut(self.sent + len(out))
        return out, Stop(matched=matched)

    def _emit(self, text: str, ids: list[int], finish: Finish | None,
              logprobs: list[Any] | None, top: list[Any] | None,
              tid_lp: list[Any] | None, usage: Usage | None = None) -> Delta | None:
        opts = self.opts
        token_texts = top_texts = None
        if opts.logprob_text:
            token_texts, top_texts = logprob_texts(self.info, logprobs, top)
        acc = self.acc
        if acc is not None:
            acc.text += text
            acc.ids.extend(ids)
            for name, val in (("logprobs", logprobs), ("top_logprobs", top),
                              ("token_ids_logprobs", tid_lp), ("token_texts", token_texts),
                              ("top_texts", top_texts)):
                if val is not None:
                    have = getattr(acc, name)
                    setattr(acc, name, val if have is None else have + val)
            self.sent += len(text)
            if finish is None:
                return None
            delta = acc
            if self.attr is not None:
                delta.attributions = self.attr.release(0, delta.text)
        else:
            delta = Delta(self.rid, text, ids, logprobs, top, tid_lp, token_texts, top_texts)
            if self.attr is not None:
                delta.attributions = self.attr.release(self.sent, text)
            if text:
                self._sent_text(text)
        if usage is not None:  # a last row's (ending.end_rows)
            delta.usage = usage
        elif finish is not None or opts.continuous_usage:
            delta.usage = self.usage()
        delta.finish = finish
        return delta

    def usage(self) -> Usage:
        return usage(self.prompt_tokens, self.completion, self.cached_tokens,
                     self.reasoning_tokens)


class _Ended(NamedTuple):
    text: str
    row: LastRow


# ====================================================================== parsers (section 8)
def refusal(opts: Open, info: TokenizerInfo) -> str | None:
    """Why an OPEN cannot be served (the shard ends it with this terminal error), or None.

    Checked once per OPEN, before any row, so a bad option never costs a row's work.
    """
    parsed = opts.reasoning_parser or opts.tool_parser or opts.min_tokens > 0
    if not (parsed or opts.attribution or opts.stop or opts.logprob_text) or \
            (info.has_text and not parsed):
        return None
    if not info.has_text:
        wants = [name for name in ("stop", "logprob_text", "attribution", "reasoning_parser",
                                   "tool_parser") if getattr(opts, name)]
        if wants:
            return (f"--tokenizer {NO_TOKENIZER} sends no text: OPEN "
                    f"{', '.join(wants)} cannot be honoured")
        return None
    if opts.reasoning_parser and opts.reasoning_parser not in REASONING_PARSERS:
        return (f"unknown reasoning_parser {opts.reasoning_parser!r}; known: "
                f"{', '.join(sorted(REASONING_PARSERS))}")
    if opts.tool_parser and opts.tool_parser not in TOOL_PARSERS:
        return (f"unknown tool_parser {opts.tool_parser!r}; known: "
                f"{', '.join(sorted(TOOL_PARSERS))}")
    problem = pairing_error(opts.reasoning_parser, opts.tool_parser)
    if problem:
        return problem
    if opts.tool_stream not in TOOL_STREAMS:
        return f"unknown tool_stream {opts.tool_stream!r}; known: {', '.join(TOOL_STREAMS)}"
    if opts.attribution:
        return "attribution is not available with reasoning_parser, tool_parser or min_tokens"
    return None


def make_request(rid: str, info: TokenizerInfo, opts: Open | None = None,
                 decoder: RowDecoder | None = None, state: Slots | None = None,
                 slot: int | None = 0) -> Request:
    """A plain Request, or a ParsedRequest when the OPEN asks for a parser or min_tokens
    (options already passed `refusal`)."""
    if opts is not None and (opts.reasoning_parser or opts.tool_parser or opts.min_tokens > 0) \
            and info.has_text:
        return ParsedRequest(rid, info, opts, decoder, state, slot)
    return Request(rid, info, opts, decoder, state, slot)


_KEEP: dict[tuple[int, tuple[str, ...]], frozenset[int]] = {}


def _marker_ids(info: TokenizerInfo, stream: ParsedStream) -> frozenset[int]:
    """The specials a pipeline's markers need, once per tokenizer and marker set."""
    markers = stream.markers
    key = (id(info), markers)
    keep = _KEEP.get(key)
    if keep is None:
        keep = _KEEP[key] = marker_token_ids(info, markers)
    return keep


class ParsedRequest(Request):
    """A request whose decoded text goes through a ParsedStream (protocol section 8).

    Its own `row`/`end`, so the plain path pays nothing for it. Rules held here (see
    parsers/__init__.py): markers that are special tokens are decoded even with
    skip_special_tokens (a keep set, by id); OPEN `stop` strings go to the stream (content
    only) and never to `Request.stops`; the row holding the min_tokens-th id is fed in two
    parts; the last row, ERROR and ABORT always run `finish()`; ids are never held.
    """

    __slots__ = ("parsed", "min_left", "hot")

    def __init__(self, rid: str, info: TokenizerInfo, opts: Open,
                 decoder: RowDecoder | None = None, state: Slots | None = None,
                 slot: int | None = 0) -> None:
        self.parsed = make_parsed_stream(opts.reasoning_parser, opts.reasoning_started,
                                         opts.tool_parser, opts.stop,
                                         opts.include_stop_str_in_output, opts.min_tokens,
                                         opts.tool_stream, opts.tools or None)
        keep = _marker_ids(info, self.parsed) if opts.skip_special_tokens else frozenset()
        super().__init__(rid, info, opts, decoder, state, slot, keep)
        self.min_left = max(0, opts.min_tokens)  # ids until stop strings apply
        # a streaming row that does not end the request, with no per-row extras: one
        # push, one feed, one Delta (`row`'s first branch)
        self.hot = (opts.stream and not opts.logprob_text and not opts.continuous_usage
                    and not self.min_left)

    def _stop_matcher(self, opts: Open) -> StopMatcher | None:
        return None  # the ParsedStream matches the OPEN's stop strings, in content

    def row(self, ids: list[int], finish: Finish | None, prompt_tokens: int,
            cached_tokens: int, reasoning_tokens: int, logprobs: list[Any] | None = None,
            top: list[Any] | None = None, tid_lp: list[Any] | None = None) -> Delta | None:
        self.completion += len(ids)
        if finish is not None or not self.hot:
            return self._row(ids, finish, prompt_tokens, cached_tokens, reasoning_tokens,
                             logprobs, top, tid_lp)
        piece = self.decoder.push(self.state, self.slot, ids)
        pd = self.parsed.feed(piece)
        if pd.stop is None:
            text = pd.text
            delta = Delta(self.rid, text, ids, logprobs, top, tid_lp)
            if pd.reasoning:
                delta.reasoning = pd.reasoning
            if pd.tool_calls:
                delta.tool_calls = pd.tool_calls
            if text:  # for a scheduler-matched stop string's cut (`_trim_matched`)
                self._sent_text(text)
            return delta
        # a service stop string: the request's last delta, with its usage
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens
        return self._emit_parsed(pd, pd.text, ids, Stop(matched=pd.stop),
                                 logprobs, top, tid_lp)

    def _row(self, ids: list[int], finish: Finish | None, prompt_tokens: int,
             cached_tokens: int, reasoning_tokens: int, logprobs: list[Any] | None,
             top: list[Any] | None, tid_lp: list[Any] | None) -> Delta | None:
        """`row` for the last row, or a row with per-row extras or the min_tokens-th id."""
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens
        decode_ids, stop = (ids, None) if finish is None else self._cut_stop(ids, finish)
        parsed = self.parsed
        if finish is not None and not self.min_left:
            piece = self.decoder.push(self.state, self.slot, decode_ids)
            return self._last_parsed(piece, ids, finish, stop, parsed.last, logprobs, top,
                                     tid_lp)
        parts = self._feed(decode_ids)
        if finish is None:
            pd = parts[0] if len(parts) == 1 else concat(parts)
            fin = None if pd.stop is None else Stop(matched=pd.stop)
            return self._emit_parsed(pd, pd.text, ids, fin, logprobs, top, tid_lp)

        def rest(_: str, flushed: str) -> ParsedDelta:
            if parsed.stopped is None:
                parts.append(parsed.feed(flushed))
                parts.append(parsed.finish())
            return parts[0] if len(parts) == 1 else concat(parts)
        return self._last_parsed("", ids, finish, stop, rest, logprobs, top, tid_lp)

    def end(self, finish: Finish, error: str | None = None) -> Delta:
        parsed = self.parsed

        def rest(_: str, flushed: str) -> ParsedDelta:
            parts = [] if parsed.stopped is not None else [parsed.feed(flushed)]
            parts.append(parsed.finish())
            return concat(parts)
        delta = self._last_parsed("", [], finish, None, rest, None, None, None, control=True)
        assert delta is not None
        delta.error = error
        return delta

    def _last_parsed(self, text: str, ids: list[int], finish: Finish, stop: int | None,
                     parse: Callable[[str, str], ParsedDelta], logprobs: list[Any] | None,
                     top: list[Any] | None, tid_lp: list[Any] | None,
                     control: bool = False) -> Delta | None:
        """The last row (or ERROR/ABORT) through the end rules, the parser taking the text
        and what the flush added (`parse`) between the flush and a matched stop string."""
        got: list[ParsedDelta] = []

        def between(text: str, flushed: str) -> tuple[str, Finish | None]:
            pd = parse(text, flushed)
            got.append(pd)
            return pd.text, None if pd.stop is None else Stop(matched=pd.stop)
        end = self._last(text, finish, stop, between, control)
        return self._emit_parsed(got[0], end.text, ids, end.row.finish, logprobs, top, tid_lp,
                                 end.row.usage)

    def _feed(self, ids: list[int]) -> list[ParsedDelta]:
        """Decode and parse one row's ids; split at the min_tokens-th id."""
        parsed, push, state, slot = self.parsed, self.decoder.push, self.state, self.slot
        if parsed.stopped is not None:
            return [ParsedDelta()]
        left = self.min_left
        if not left:
            return [parsed.feed(push(state, slot, ids))]
        if len(ids) < left:
            self.min_left = left - len(ids)
            return [parsed.feed(push(state, slot, ids))]
        self.min_left = 0
        opts = self.opts
        self.hot = opts.stream and not opts.logprob_text and not opts.continuous_usage
        first = parsed.feed(push(state, slot, ids[:left]))
        parsed.exempt_end()
        if first.stop is not None:
            return [first]
        return [first, parsed.feed(push(state, slot, ids[left:]))]

    def _emit_parsed(self, pd: ParsedDelta, text: str, ids: list[int],
                     finish: Finish | None, logprobs: list[Any] | None,
                     top: list[Any] | None, tid_lp: list[Any] | None,
                     usage: Usage | None = None) -> Delta | None:
        acc = self.acc
        if acc is not None:  # stream=false: the parser channels accumulate too
            acc.reasoning += pd.reasoning
            if pd.tool_calls:
                # one entry per call; a call flagged malformed leaves (its text is content)
                acc.tool_calls = merge_calls(acc.tool_calls, pd.tool_calls)
        if finish is not None and self.parsed.called:
            # the request ended with tool calls: a frontend reports finish_reason "tool_calls"
            finish = with_tool_calls(finish)
        delta = self._emit(text, ids, finish, logprobs, top, tid_lp, usage)
        if delta is not None and acc is None:
            delta.reasoning = pd.reasoning
            delta.tool_calls = pd.tool_calls
        return delta
