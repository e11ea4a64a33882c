"""The SGLang protocol's writer: `BatchStrOutput` replies (docs/protocol.md section 11), to
`--output` or to each row's tokenizer worker; the scheduler's fields a reply passes on come
beside the rows (`extra`), and the service's own last rows are written by `reply.Replies`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_tok.protocols.model.columns import ColumnsOut
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.protocols.model.interface import Message
from sglang_tok.protocols.model.output import Sink
from sglang_tok.protocols.sglang.reply import Replies


class SglangWriter:
    """A message's decoded rows with what the scheduler passed on, or the service's own
    last rows."""

    def __init__(self, replies: Replies, pickled: Callable[[bytes], bytes] | None = None
                 ) -> None:
        self.replies = replies
        self.workers = replies.workers  # the reader's too: one map per process
        self.sent = 0
        # a pickle-IPC release (0.5.12-0.5.14): each message as its own class, pickled
        self.pickled = pickled

    def out(self, messages: list[Message]) -> list[Message]:
        """Messages as the release's TokenizerManager reads them."""
        pickled = self.pickled
        if pickled is None:
            return messages
        return [(where, pickled(msg)) for where, msg in messages]

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
        return self.out(replies)

    def restarted(self, source: int, pid: int) -> list[Message]:
        return []  # the TokenizerManager tracks no sender
