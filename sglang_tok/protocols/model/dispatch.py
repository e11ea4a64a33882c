"""One dispatcher for the control frames: each type to its one handler, as data.

SGLang's detokenizer keeps a `TypeBasedDispatcher` (a list of (type, handler) pairs, called
with a message); here the same, typed: `on(Open, table.on_open)` checks that the handler
takes an Open, and `ControlDispatcher` calls the handler of a message's own type with the
message and a sink (a type with no handler is an error, not a silent drop). A shard builds
its dispatcher once, of its table's handlers (`table_handlers`: OPEN, ERROR, ABORT, RESULT;
a PING holds no request and is the shard's own); the in-process route
(dev/sglang_tok_testkit/local_route.py) builds the same one for the tables it drives, so both
deliver control frames alike.

`rids_of` is what a control message holds of requests, written once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from sglang_tok.protocols.model.control import Abort, Control, Error, Open, Result

__all__ = ["ControlDispatcher", "ControlTable", "Pair", "on", "rids_of", "table_handlers"]

M = TypeVar("M", bound=Control)
S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)
R = TypeVar("R")
# one (type, handler) pair; the handler's message type is checked by `on`, then erased
Pair = tuple[type, Callable[[Any, S], R]]


def on(kind: type[M], handler: Callable[[M, S], R]) -> Pair[S, R]:
    """The pair of a control type and its handler (mypy checks that it takes that type)."""
    return kind, handler


class ControlDispatcher(Generic[S, R]):
    """Calls the handler of a control message's type with the message and a sink."""

    __slots__ = ("_handlers",)

    def __init__(self, pairs: Iterable[Pair[S, R]]) -> None:
        handlers: dict[type, Callable[[Any, S], R]] = {}
        for kind, handler in pairs:
            if kind in handlers:
                raise ValueError(f"two handlers for {kind.__name__}")
            handlers[kind] = handler
        self._handlers = handlers

    def __call__(self, msg: Control, out: S) -> R:
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"no handler for a {type(msg).__name__} control message")
        return handler(msg, out)

    @property
    def kinds(self) -> frozenset[type]:
        return frozenset(self._handlers)


class ControlTable(Protocol[S_contra]):
    """What takes the routed control frames in a shard: its rid table."""

    def on_open(self, msg: Open, out: S_contra) -> None: ...
    def on_error(self, msg: Error, out: S_contra) -> None: ...
    def on_abort(self, msg: Abort, out: S_contra) -> None: ...
    def on_result(self, msg: Result, out: S_contra) -> None: ...


def table_handlers(table: ControlTable[S]) -> list[Pair[S, None]]:
    """OPEN, ERROR, ABORT and RESULT to a table's handlers (a PING is its process's)."""
    return [on(Open, table.on_open), on(Error, table.on_error), on(Abort, table.on_abort),
            on(Result, table.on_result)]


def rids_of(msg: Control) -> list[str]:
    """The rids whose requests a control message opens or ends: an OPEN's or ERROR's rid,
    an ABORT's rids; a RESULT or a PING holds no request state (none)."""
    match msg:
        case Open(rid=rid) | Error(rid=rid):
            return [rid]
        case Abort(rids=rids):
            return rids
    return []
