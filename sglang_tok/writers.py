"""What the service sends its frontend: one writer per output protocol, chosen once in each
process's `main` from `Config`, behind one interface the shard and the egress call alike.

- `NativeWriter`: DELTAS, COLUMNS or PACKED messages to `--output` (docs/protocol.md
  section 5), numbered per sender.
- `SglangWriter`: SGLang's `BatchStrOutput` (section 11), to `--output` or to each row's
  tokenizer worker; the scheduler's fields a reply passes on come beside the rows
  (`extra`).

A writer owns what its protocol keeps across messages (the message count, the tokenizer
worker of each live request), so no caller holds a protocol test of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from . import protocol
from .integrations.sglang.reply import Replies
from .protocol import ColumnsOut, Delta, Restarted, Sink

Message = tuple[str | None, bytes]  # (endpoint, None: --output; the message)


class Writer(Protocol):
    sent: int  # messages sent so far (the ledger of endings counts them)

    def sink(self) -> Sink:
        """An empty sink for one input message's deltas."""
        ...

    def messages(self, out: Sink, extra: Any, source: int) -> list[Message]:
        """The output messages for a sink's deltas; `extra`: what the input message's
        replies pass on (SGLang: packed, or the object from an egress in-process),
        `source`: the sender (a shard, or EGRESS)."""
        ...

    def restarted(self, source: int, pid: int) -> list[Message]:
        """What a restarted sender says first."""
        ...

    def note_workers(self, rids: Sequence[str], workers: Sequence[str | None]) -> None:
        """Where these rids' rows go (a request's tokenizer worker), when known."""
        ...

    def workers_of(self, rids: Sequence[str]) -> list[str | None]:
        """The tokenizer worker of each rid, where the writer knows one ([]: none kept)."""
        ...


class NativeWriter:
    """DELTAS / COLUMNS / PACKED (`--output-format`), to --output."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.sent = 0

    def sink(self) -> Sink:
        return protocol.output_sink(self.fmt)

    def messages(self, out: Sink, extra: Any, source: int) -> list[Message]:
        msg = protocol.encode_output(self.fmt, source, self.sent, out)
        self.sent += 1
        return [(None, msg)]

    def restarted(self, source: int, pid: int) -> list[Message]:
        """Its numbering starts again from 0 (protocol section 5.3)."""
        return [(None, protocol.encode_restarted(Restarted(source, pid)))]

    def note_workers(self, rids: Sequence[str], workers: Sequence[str | None]) -> None:
        pass

    def workers_of(self, rids: Sequence[str]) -> list[str | None]:
        return []


class SglangWriter:
    """`BatchStrOutput` replies (integrations/sglang/reply.py): a message's decoded rows
    with what the scheduler passed on, or the service's own last rows."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        self.sent = 0

    def sink(self) -> Sink:
        return ColumnsOut()  # the replies take the decoders' texts as they are

    def messages(self, out: Sink, extra: Any, source: int) -> list[Message]:
        if extra:
            assert isinstance(out, ColumnsOut)
            replies = self.replies.rows(out, extra)
        else:
            deltas: list[Delta] = out.build(source, self.sent).deltas \
                if isinstance(out, ColumnsOut) else out  # type: ignore[assignment]
            replies = self.replies.last_rows(deltas)
        self.sent += len(replies)
        return replies

    def restarted(self, source: int, pid: int) -> list[Message]:
        return []  # the TokenizerManager tracks no sender

    def note_workers(self, rids: Sequence[str], workers: Sequence[str | None]) -> None:
        ipc_of = self.replies.ipc_of
        for rid, ipc in zip(rids, workers):
            if ipc is not None:
                ipc_of[rid] = ipc

    def workers_of(self, rids: Sequence[str]) -> list[str | None]:
        ipc_of = self.replies.ipc_of
        return [ipc_of.get(rid) for rid in rids] if ipc_of else []
