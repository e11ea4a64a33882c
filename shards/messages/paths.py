"""Which path a request's rows take in its shard, decided once, at its first row.

The array path (shards/decoders.py) decodes a message's plain rows together, from
per-slot arrays; it knows text, ids, usage, logprob values and their texts, and (for
byte-level BPE, whose ids' byte lengths give the anchors: shards/byte_level/attribution.py)
attribution, nothing else. Everything else needs per-request Python state and takes the
per-row path (a `Request`, shards/messages/request.py). The reason is kept (the shard
counts requests per reason), so an operator can see why a deployment is not on the fast
path."""

from __future__ import annotations

from collections.abc import Callable

from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import TokenizerInfo

from ..decoders import array_attributes

ARRAY = "array"
# the rule a shard's table asks (`row_reason`, unless a test or a benchmark gives another):
# (the OPEN or None, the tokenizer, whether the shard has an array decoder) -> the reason
PathRule = Callable[[Open | None, TokenizerInfo, bool], str | None]


def row_reason(opts: Open | None, info: TokenizerInfo, array_decoder: bool) -> str | None:
    """None for the array path, else why the request needs the per-row path.

    `array_decoder`: the shard has an array decoder for this tokenizer (byte-level BPE, or
    SentencePiece byte fallback); WordPiece and other decoder chains stay per row.
    """
    if not array_decoder or not info.has_text:
        return "tokenizer"
    if opts is None:
        return None
    if not opts.stream:
        return "stream_false"
    if opts.stop:
        return "stop"
    if opts.logprob_text and not info.token_texts:
        return "logprob_text"
    if opts.attribution and not array_attributes(info):
        # byte fallback: a byte run's ids are anchored per character when the run ends
        # (shards/decoding/runs.py), which the array decoder does not track
        return "attribution"
    if opts.reasoning_parser or opts.tool_parser:
        return "parser"
    if opts.min_tokens > 0:
        return "min_tokens"
    return None
