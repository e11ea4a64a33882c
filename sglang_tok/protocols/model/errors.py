"""What ends a frame or a request the service itself ends, whatever the protocol:
`FrameError` (a frame dropped whole, with the rids still readable from it) and
the errors a request is told."""

from __future__ import annotations

from typing import Any

import msgspec

from sglang_tok.finish import FINISH_TYPES, Finish, finish_of

MALFORMED_FRAME = "malformed scheduler output frame"
SHARD_RESTARTED = "detokenizer shard restarted"
EGRESS_RESTARTED = "detokenizer egress restarted"


class FrameError(Exception):
    """A frame that must be dropped whole; `rids` are those still readable from it."""

    def __init__(self, reason: str, detail: str, rids: list[str] | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.rids: list[str] = rids or []


def checked_finishes(fins: list[Any], rids: list[str]) -> list[Finish | None]:
    """Finish reasons a typed decode refused, read again as any maps: raise for the first
    that is not a map of a known type with fields of SGLang's `to_json` forms (an empty
    map too); else the reasons, typed. Both protocols' readers take their finishes this
    way (a frame whose reasons all decode typed never comes here)."""
    for fin in fins:
        if fin is None:
            continue
        if not fin:
            raise FrameError("finish", "empty finish reason", rids)
        kind = fin.get("type")  # any msgpack value: a list or map is unhashable
        if not isinstance(kind, str) or kind not in FINISH_TYPES:
            raise FrameError("finish", f"unknown finish reason {fin!r:.80}", rids)
    try:
        return [None if fin is None else finish_of(fin) for fin in fins]
    except msgspec.ValidationError as exc:
        raise FrameError("finish", f"a finish reason not of SGLang's forms: {exc}",
                         rids) from None
