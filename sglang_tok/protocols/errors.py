"""What ends a frame or a request the service itself ends, whatever the protocol:
`FrameError` (a frame dropped whole, with the rids still readable from it) and
the errors a request is told."""

from __future__ import annotations

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
