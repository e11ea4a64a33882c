"""The native protocol's tag bytes: the first byte of every frame (docs/protocol.md), all in
one table so that no two frames share one."""

from __future__ import annotations

TAG_RESULT = 0x01
TAG_BATCH = 0x02
TAG_ERROR = 0x03
TAG_OPEN = 0x4F
TAG_ABORT = 0x41
TAG_PING = 0x50
TAG_DELTAS = 0x44
TAG_PONG = 0x51
TAG_RESTARTED = 0x52
TAG_COLUMNS = 0x43
TAG_PACKED = 0x4B
INPUT_TAGS = {TAG_RESULT: "result", TAG_BATCH: "batch", TAG_ERROR: "error",
              TAG_OPEN: "open", TAG_ABORT: "abort", TAG_PING: "ping"}
EGRESS = -1  # the egress's `shard` in DELTAS, COLUMNS, PONG and RESTARTED
