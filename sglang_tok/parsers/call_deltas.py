"""The calls of one output as deltas: the rules every format shares, kept in one place.

Call indices, names checked against the request's `tools`, calls flagged malformed or cut,
and malformed elements given back as text are the same for every format, so no format
and no framing (the engine's, Harmony's) writes them again: a reader's events (the
`readers.Event` union), a whole parse's `Call`s and the end of the output all become
`ToolCallDelta`s here.
"""

from __future__ import annotations

from .readers import Call, CallReader, Calls, Dropped, Event, Opened
from .schema import Schemas
from .types import Item, ToolCallDelta


class CallDeltas:
    """One output's calls: `take` a reader's events (incremental), `close` or `cut` the
    open body, `whole` a whole parse's calls. `opened`, `dropped` and `rejected` are the
    open body's (incremental); `begin` starts a body."""

    __slots__ = ("count", "delivered", "dropped", "opened", "rejected", "schemas")

    def __init__(self, schemas: Schemas | None) -> None:
        self.schemas = schemas
        self.count = 0  # indices given out (a malformed call's index is not reused)
        self.delivered = 0  # calls that stand (valid, or cut by the end of the output)
        self.opened: list[int] = []  # indices of the open body's sent calls
        self.dropped = ""  # text of the open body's malformed elements
        self.rejected = False  # the open body is already known to be text

    def begin(self) -> None:
        """A call body opens (or the output ended): nothing of it sent yet."""
        self.opened = []
        self.dropped = ""
        self.rejected = False

    def take(self, events: list[Event], out: list[Item]) -> bool:
        """A reader's events as call deltas onto `out`; False once a name is rejected."""
        opened = self.opened
        for event in events:
            if isinstance(event, str):
                if event and opened:
                    i = opened[-1]
                    last = out[-1] if out else None
                    if isinstance(last, ToolCallDelta) and last.index == i \
                            and last.name is None:
                        last.arguments += event  # one fragment per call per step
                    else:
                        out.append(ToolCallDelta(i, None, event))
            elif isinstance(event, Opened):
                if self.schemas is not None and event.name not in self.schemas:
                    self.rejected = True
                    return False
                out.append(ToolCallDelta(self.count, event.name, "", id=event.id or None))
                opened.append(self.count)
                self.count += 1
            else:
                self.dropped += event.text
                if event.named and opened:  # its name was sent: flag that call
                    out.append(ToolCallDelta(opened.pop(), malformed=True))
        return True

    def close(self, reader: CallReader, inner: str, out: list[Item]) -> bool:
        """The open body is complete (`inner`): its reader's last events and its close
        are sent, and its calls stand; or, malformed (or rejected), those sent are
        flagged. The body's malformed elements, beside calls that stand, are text."""
        ok = not self.rejected
        if ok:
            try:
                ok = self.take(reader.read(inner, len(inner)), out)
                rest = reader.close(inner) if ok else None
            except RecursionError:
                rest = None
            ok = rest is not None and self.take(rest, out) and bool(self.opened)
        if ok:
            self.delivered += len(self.opened)
            if self.dropped:
                out.append(self.dropped)
        else:
            for i in self.opened:
                out.append(ToolCallDelta(i, malformed=True))
        self.begin()
        return ok

    def cut(self, out: list[Item]) -> bool:
        """The output ended inside a body: when a name was sent (and not rejected), its
        calls stand as sent, each flagged cut; False: the body is text."""
        if not self.opened or self.rejected:
            return False
        for i in self.opened:
            out.append(ToolCallDelta(i, cut=True))
        self.delivered += len(self.opened)
        return True

    def whole(self, calls: Calls | None, out: list[Item]) -> bool:
        """Whole mode: a body's calls (None: malformed) are sent, each in one delta, with
        its malformed elements as text; False when none stands or a name is not in the
        request's tools (then the body is text, as a malformed one)."""
        good = [] if calls is None else [c for c in calls if isinstance(c, Call)]
        if not good or (self.schemas is not None
                        and any(c.name not in self.schemas for c in good)):
            return False
        for call in good:
            out.append(ToolCallDelta(self.count, call.name, call.arguments, id=call.id))
            self.count += 1
        self.delivered += len(good)
        if calls is not None and len(good) < len(calls):
            dropped = "".join(c.text for c in calls if isinstance(c, Dropped))
            if dropped:
                out.append(dropped)
        return True
