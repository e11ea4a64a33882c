"""The one control dispatcher (sglang_tok/protocols/model/dispatch.py) the shard and the
in-process route share: each control type reaches its own handler, with the sink; a type
without one is an error; the rids a control message holds of requests; and a shard holding
its dispatcher is still freed when dropped (no reference cycle)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import zmq
from decoding import tokenizer

from sglang_tok.config import Config, finalize
from sglang_tok.process import Status
from sglang_tok.protocols.model import control
from sglang_tok.protocols.model.control import Abort, Error, Open, Ping, Pong, Result
from sglang_tok.protocols.model.dispatch import (
    ControlDispatcher,
    on,
    rids_of,
    table_handlers,
)
from shards.main import Shard

MESSAGES: list[control.Control] = [Open("o", stop=["\n"]), Error("e", "boom"), Abort(["a", "b"]),
            Result("r", b"\x01"), Ping(7)]


class Recorder:
    """A table that writes each call into the sink it is given."""

    def on_open(self, msg: Open, out: list[Any]) -> None:
        out.append(("open", msg))

    def on_error(self, msg: Error, out: list[Any]) -> None:
        out.append(("error", msg))

    def on_abort(self, msg: Abort, out: list[Any]) -> None:
        out.append(("abort", msg))

    def on_result(self, msg: Result, out: list[Any]) -> None:
        out.append(("result", msg))


def test_each_control_type_reaches_its_handler_with_the_sink() -> None:
    table = Recorder()

    def ping(msg: Ping, out: list[Any]) -> str:
        out.append(("ping", msg))
        return "answered"

    dispatch: ControlDispatcher[list[Any], str | None] = ControlDispatcher(
        [*table_handlers(table), on(Ping, ping)])
    assert dispatch.kinds == {Open, Error, Abort, Result, Ping}
    for msg, name in zip(MESSAGES, ["open", "error", "abort", "result", "ping"]):
        sink: list[Any] = []
        decoded = control.decode_control(control.encode_control(msg))  # as a shard gets it
        got = dispatch(decoded, sink)
        assert sink == [(name, decoded)] and decoded == msg
        assert got == ("answered" if name == "ping" else None)


def test_a_type_without_a_handler_is_an_error() -> None:
    dispatch = ControlDispatcher(table_handlers(Recorder()))  # no PING handler
    sink: list[Any] = []
    with pytest.raises(TypeError, match="no handler for a Ping control message"):
        dispatch(Ping(1), sink)
    with pytest.raises(TypeError, match="no handler for a Pong"):
        dispatch(Pong(1, 0), sink)  # type: ignore[arg-type]  # not a control frame at all
    assert sink == []


def test_a_subclass_is_not_its_parents_type() -> None:
    """Dispatch is by a message's own type, as the decoders build them: nothing else."""

    class MyOpen(Open):
        pass

    with pytest.raises(TypeError):
        ControlDispatcher(table_handlers(Recorder()))(MyOpen("x"), [])


def test_two_handlers_for_one_type_are_refused() -> None:
    table = Recorder()
    with pytest.raises(ValueError, match="two handlers for Open"):
        ControlDispatcher([*table_handlers(table), on(Open, table.on_open)])


@pytest.mark.parametrize(("msg", "rids"), [
    (Open("o"), ["o"]), (Error("e", "boom"), ["e"]), (Abort(["a", "b", "a"]), ["a", "b", "a"]),
    (Result("r", b""), []), (Ping(0), []),
])
def test_the_rids_a_control_message_holds_of_requests(msg: control.Control,
                                                      rids: list[str]) -> None:
    assert rids_of(msg) == rids


def test_a_shard_dropped_unclosed_is_freed_at_once(tmp_path: Path) -> None:
    """The shard's dispatcher holds no handler of the shard's own: a cycle would leave a
    dropped shard to the cyclic GC, whose zmq Context finalizer then hangs on the sockets
    it has not closed yet (scripts/bench/stages.py drops a shard per trial)."""
    cfg = finalize(Config(shards=1, runtime_dir=str(tmp_path / "rt"), http="127.0.0.1:0",
                          pin=False, log_level="WARNING"))
    ctx = zmq.Context()
    gc.disable()
    try:
        shard = Shard(cfg, Status(3), 0, tokenizer("deepseek-v4"), 0, ctx=ctx,
                      metrics=mock.MagicMock())
        kinds = shard.control.kinds
        ref = weakref.ref(shard)
        del shard
        held = ref() is not None
    finally:
        gc.enable()
        ctx.destroy(linger=0)  # closes the sockets of a shard still held
    assert not held, "a reference cycle holds the shard"
    assert kinds == {Open, Error, Abort, Result}  # a PING is the shard's own
