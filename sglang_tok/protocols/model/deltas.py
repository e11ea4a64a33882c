"""DELTAS, the per-row output frame (docs/protocol.md section 5): one `Delta` per
output event of one request."""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import msgspec

from sglang_tok.finish import ABORT, Finish

_encoder = msgspec.msgpack.Encoder()


class Usage(msgspec.Struct, gc=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    reasoning_tokens: int


class ToolCallDelta(msgspec.Struct, omit_defaults=True, gc=False):
    """One fragment of one tool call (protocol section 8): `name` on a call's first
    fragment; a frontend concatenates `arguments` per `index`. On a call's last delta in
    incremental mode, `malformed`: the call turned out not to parse (its text came back as
    content; drop the call), or `cut`: the output ended inside it (it stands as sent).
    `id`, on the first fragment only: the call id the model wrote (kimi_k2's
    `functions.NAME:IDX`), for OpenAI's `tool_calls[].id`; omitted when the format has none."""

    index: int
    name: str | None = None
    arguments: str = ""
    malformed: bool = False
    cut: bool = False
    id: str | None = None


class Delta(msgspec.Struct, omit_defaults=True, gc=False):
    """One output event of one request; default-valued keys stay off the wire."""

    rid: str
    text: str = ""
    ids: list[int] = []
    logprobs: list[Any] | None = None
    top_logprobs: list[Any] | None = None
    token_ids_logprobs: list[Any] | None = None
    token_texts: list[str] | None = None
    top_texts: list[Any] | None = None
    attributions: list[tuple[int, int, int]] | None = None
    finish: Finish | None = None
    usage: Usage | None = None
    error: str | None = None
    result: bytes | None = None
    # section 8 (a parser on): reasoning text and tool-call fragments. Whether the request
    # ended with tool calls is a key of the last delta's `finish` (`"tool_calls": true`):
    # a 16th field would turn this map's fixmap header into map16 and change the bytes of
    # every existing delta, so Delta stays at 15 fields.
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] | None = None


def terminal(rid: str, error: str | None, usage: Usage) -> Delta:
    """A request's last delta when the service, not the scheduler, ends it."""
    return Delta(rid, finish=ABORT, error=error, usage=usage)


class Deltas(msgspec.Struct, gc=False):
    shard: int
    seq: int
    deltas: list[Delta]


def encode_deltas(msg: Deltas) -> bytes:
    return b"\x44" + _encoder.encode(msg)


class DeltasOut(list[Delta]):
    """DELTAS' sink: the message's Deltas themselves, with the sink's interface."""

    __slots__ = ()

    def put(self, row: int, name: str, value: Any) -> None:
        setattr(self[row], name, value)

    def settle(self, name: str) -> None:
        pass  # a Delta's fields have no order to keep

    def add_plain(self, rids: list[str], decoded: Any, counts: list[int] | None,
                  sent: list[int], rows: Any, families: list[Any], fams: Any) -> None:
        if counts is None:
            row_ids = [[i] for i in sent]
        else:
            cuts = [0, *accumulate(counts)]
            row_ids = [sent[a:b] for a, b in zip(cuts, cuts[1:])]
        deltas = list(map(Delta, rids, decoded.texts(), row_ids))
        if families:  # only the rows that carry logprob values cost a Python step
            msg_rows = rows.rows
            at = fams.get().carrying[msg_rows].nonzero()[0]
            for j, row in zip(at.tolist(), msg_rows[at].tolist()):
                d = deltas[j]
                d.logprobs, d.top_logprobs, d.token_ids_logprobs = fams.extras(row)
        self += deltas
