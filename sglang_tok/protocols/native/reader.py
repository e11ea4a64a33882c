"""The native protocol's reader: BATCH frames and the control frames (docs/protocol.md
sections 2-4), each read into one event of the protocols' interface."""

from __future__ import annotations

from collections.abc import Container

from sglang_tok.protocols.model.batch import decode_batch
from sglang_tok.protocols.model.control import Open, Ping, decode_control
from sglang_tok.protocols.model.errors import FrameError
from sglang_tok.protocols.model.interface import Control, Event, Probe, Rows
from sglang_tok.protocols.model.tags import TAG_BATCH


class NativeReader:
    """The native protocol: BATCH frames, and control frames forwarded as they came."""

    def __init__(self, max_rid_length: int, max_row_ids: int) -> None:
        self.max_rid_length = max_rid_length
        self.max_row_ids = max_row_ids

    def read(self, frame: memoryview, where: dict[str, int],
             ended: Container[str] = ()) -> Event:
        tag = frame[0]
        if tag == TAG_BATCH:
            return Rows(decode_batch(frame, self.max_rid_length, self.max_row_ids))
        msg = decode_control(frame)
        if isinstance(msg, Ping):
            return Probe(msg.nonce, frame)
        if isinstance(msg, Open) and len(msg.rid) > self.max_rid_length:
            raise FrameError("limit_rid_length",
                             f"rid longer than --max-rid-length {self.max_rid_length}")
        return Control(msg, frame, tag)
