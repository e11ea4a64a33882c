"""The native protocol's writer: DELTAS, COLUMNS or PACKED messages to `--output`
(docs/protocol.md section 5), numbered per sender."""

from __future__ import annotations

from typing import Any

from sglang_tok.protocols.model.control import Restarted, encode_restarted
from sglang_tok.protocols.model.interface import Message
from sglang_tok.protocols.model.output import Sink, encode_output, output_sink


class NativeWriter:
    """DELTAS / COLUMNS / PACKED (`--output-format`), to --output."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.sent = 0
        self.workers = None  # one --output

    def sink(self) -> Sink:
        return output_sink(self.fmt)

    def messages(self, out: Sink, extra: Any, source: int) -> list[Message]:
        msg = encode_output(self.fmt, source, self.sent, out)
        self.sent += 1
        return [(None, msg)]

    def restarted(self, source: int, pid: int) -> list[Message]:
        """Its numbering starts again from 0 (protocol section 5.3)."""
        return [(None, encode_restarted(Restarted(source, pid)))]

