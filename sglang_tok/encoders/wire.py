"""The encode service's messages: client request/reply (docs/protocol.md, "Encode service")
and the two one-byte kinds between the broker and its workers.

Requests are validated whole in the broker, before any worker sees them: a worker only ever
receives a request that decodes and fits the limits, so no client input can take one down.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

# an echoed request id: any msgpack scalar
Scalar = int | float | str | bool | None

# broker <-> worker, first byte of the one frame after the routing id
READY = b"\x01"  # worker -> broker: idle (sent at start, then every READY_EVERY_S when idle)
REPLY = b"\x02"  # worker -> broker: REPLY + the reply to the job it held; it is idle again
JOB = b"\x03"  # broker -> worker: JOB + the client's request bytes, already validated

# error reasons: the `sglang_tok_encode_errors_total{reason}` label of every error reply
MALFORMED = "malformed"
LIMIT_TEXTS = "limit_texts"
LIMIT_TEXT_CHARS = "limit_text_chars"
LIMIT_TOTAL_CHARS = "limit_total_chars"
QUEUE_FULL = "queue_full"
WORKER_DIED = "worker_died"
SHUTTING_DOWN = "shutting_down"
INTERNAL = "internal"
ERROR_REASONS = (MALFORMED, LIMIT_TEXTS, LIMIT_TEXT_CHARS, LIMIT_TOTAL_CHARS, QUEUE_FULL,
                 WORKER_DIED, SHUTTING_DOWN, INTERNAL)


class EncodeRequest(msgspec.Struct):
    """Unknown keys are ignored (msgspec's default), so clients may add their own."""

    texts: list[str]
    id: Scalar = None
    add_special_tokens: bool = True
    offsets: bool = False


class RequestId(msgspec.Struct):
    """Only the id, to echo it in the error reply to a request that failed validation."""

    id: Scalar = None


class EncodeReply(msgspec.Struct, omit_defaults=True):
    """`offsets` is left out unless the request asked for it; `id` is always there."""

    id: Scalar
    ids: list[list[int]]
    offsets: list[list[tuple[int, int]]] | None = None


class EncodeError(msgspec.Struct):
    id: Scalar
    error: str


@dataclass(frozen=True)
class Limits:
    texts: int
    text_chars: int
    total_chars: int

    @property
    def max_bytes(self) -> int:
        """No request within the limits is bigger (UTF-8 is at most 4 bytes a character;
        a msgpack str header is at most 5), so libzmq may refuse anything larger unread."""
        return 4 * self.total_chars + 5 * self.texts + 64 * 1024


class Invalid(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_decoder = msgspec.msgpack.Decoder(EncodeRequest)
_id_decoder = msgspec.msgpack.Decoder(RequestId)
encoder = msgspec.msgpack.Encoder()


def check(body: bytes, limits: Limits) -> EncodeRequest:
    """The request, or Invalid naming the reason and the limit (its command-line flag)."""
    try:
        req = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise Invalid(MALFORMED, f"invalid request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise Invalid(MALFORMED, f"request is not msgpack: {exc}") from None
    texts = req.texts
    if len(texts) > limits.texts:
        raise Invalid(LIMIT_TEXTS, f"{len(texts)} texts in one request; the limit is "
                      f"--encode-max-texts {limits.texts}")
    total = 0
    for k, text in enumerate(texts):
        n = len(text)
        if n > limits.text_chars:
            raise Invalid(LIMIT_TEXT_CHARS, f"text {k} has {n} characters; the limit is "
                          f"--encode-max-text-chars {limits.text_chars}")
        total += n
    if total > limits.total_chars:
        raise Invalid(LIMIT_TOTAL_CHARS, f"{total} characters in one request; the limit is "
                      f"--encode-max-total-chars {limits.total_chars}")
    return req


def request_id(body: bytes) -> Scalar:
    """Best effort: the id of a request that is a msgpack map with a scalar `id`."""
    try:
        return _id_decoder.decode(body).id
    except msgspec.MsgspecError:
        return None


def error_reply(rid: Scalar, message: str) -> bytes:
    return encoder.encode(EncodeError(rid, message))
