"""The control frames (docs/protocol.md section 4): OPEN, ABORT, ERROR, RESULT and PING
in, PONG and RESTARTED out."""

from __future__ import annotations

from typing import Any

import msgspec

from sglang_tok.protocols.model.errors import FrameError
from sglang_tok.protocols.model.tags import (
    INPUT_TAGS,
    TAG_ABORT,
    TAG_ERROR,
    TAG_OPEN,
    TAG_PING,
    TAG_RESULT,
)

_any_decoder = msgspec.msgpack.Decoder()


# --------------------------------------------------------------------------- control frames
_encoder = msgspec.msgpack.Encoder()


class Result(msgspec.Struct, array_like=True, gc=False):
    rid: str
    payload: bytes


class Error(msgspec.Struct, array_like=True, gc=False):
    rid: str
    message: str


class Open(msgspec.Struct, gc=False):
    """Per-request decode options; unknown keys are ignored so fields can be appended."""

    rid: str
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    prompt_ids: list[int] = []
    stop: list[str] = []
    include_stop_str_in_output: bool = False
    stream: bool = True
    continuous_usage: bool = False
    logprob_text: bool = False
    attribution: bool = False
    # section 8: per-request parsers and min_tokens
    reasoning_parser: str = ""
    # None (absent): the reasoning parser's own default (True for deepseek-r1, as SGLang)
    reasoning_started: bool | None = None
    tool_parser: str = ""
    min_tokens: int = 0
    # section 8: the request's OpenAI tool definitions (bounded by
    # --max-tools-bytes) and how calls stream: "incremental" or "whole"
    tools: list[dict[str, Any]] = []
    tool_stream: str = "incremental"
    # with no_stop_trim, a scheduler-matched stop string stays in the text and what follows
    # it is cut (SGLang 0.5.14 on); absent (UNSET, never encoded): the whole text stays
    trim_after_stop: bool | msgspec.UnsetType = msgspec.UNSET


DEFAULT_OPEN_FIELDS = Open("")


class Abort(msgspec.Struct, gc=False):
    rids: list[str]


class Ping(msgspec.Struct, gc=False):
    nonce: int


class Pong(msgspec.Struct, gc=False):
    nonce: int
    shard: int


class Restarted(msgspec.Struct, gc=False):
    """A replaced process's first output message (protocol section 5.3): its `seq` starts
    again from 0, and after the egress's, a frontend ends every request in flight."""

    shard: int  # as in DELTAS: -1 for the egress
    pid: int


_decoders: dict[int, msgspec.msgpack.Decoder[Any]] = {
    TAG_RESULT: msgspec.msgpack.Decoder(Result),
    TAG_ERROR: msgspec.msgpack.Decoder(Error),
    TAG_OPEN: msgspec.msgpack.Decoder(Open),
    TAG_ABORT: msgspec.msgpack.Decoder(Abort),
    TAG_PING: msgspec.msgpack.Decoder(Ping),
}
Control = Result | Error | Open | Abort | Ping


def decode_control(frame: bytes | memoryview) -> Control:
    """Decode a non-BATCH input frame; raise FrameError naming the rids it could read."""
    if not frame:
        raise FrameError("empty", "zero-length frame")
    tag = frame[0]
    dec = _decoders.get(tag)
    if dec is None:
        raise FrameError("unknown_tag", f"unknown tag 0x{tag:02x}")
    body = memoryview(frame)[1:]
    try:
        msg = dec.decode(body)
    except (ValueError, RecursionError) as exc:  # msgspec errors, bad UTF-8
        raise FrameError("body", f"{INPUT_TAGS[tag]}: {str(exc)[:200]}",
                         _body_rids(body)) from None
    if isinstance(msg, (Result, Error, Open)) and not msg.rid:
        raise FrameError("body", f"{INPUT_TAGS[tag]}: empty rid")
    if isinstance(msg, Abort) and not all(msg.rids):
        raise FrameError("body", "abort: empty rid", [r for r in msg.rids if r])
    return msg


def _body_rids(body: memoryview) -> list[str]:
    try:
        obj = _any_decoder.decode(body)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return []
    cand: Any = None
    if isinstance(obj, list) and obj:
        cand = [obj[0]]
    elif isinstance(obj, dict):
        cand = obj.get("rids") if "rids" in obj else [obj.get("rid")]
    if not isinstance(cand, list):
        return []
    return [r for r in cand if isinstance(r, str) and r]


def encode_control(msg: Control) -> bytes:
    tag = {Result: TAG_RESULT, Error: TAG_ERROR, Open: TAG_OPEN, Abort: TAG_ABORT,
           Ping: TAG_PING}[type(msg)]
    return bytes((tag,)) + _encoder.encode(msg)


def encode_pong(msg: Pong) -> bytes:
    return b"\x51" + _encoder.encode(msg)


def encode_restarted(msg: Restarted) -> bytes:
    return b"\x52" + _encoder.encode(msg)
