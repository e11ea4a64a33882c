"""Each live request's tokenizer worker (`protocols/sglang/workers.py`), as the egress keeps
it: a request whose last row was read but not yet acknowledged by its shard still has its
worker, so that a shard dying then sends its error where its rows were going (with two
tokenizer workers a request whose error goes nowhere hangs in SGLang's TokenizerManager)."""

from __future__ import annotations

import msgspec
from sglang_cases import token_ids_message

from sglang_tok.protocols.sglang.layout import builtin
from sglang_tok.protocols.sglang.positions import Positions
from sglang_tok.protocols.sglang.reader import SglangReader
from sglang_tok.protocols.sglang.workers import WorkerMap

W0, W1 = "ipc:///tmp/w0.ipc", "ipc:///tmp/w1.ipc"
_fields = msgspec.msgpack.Decoder(list[msgspec.Raw])


def read(reader: SglangReader, rows: list[dict], where: dict[str, int]) -> None:
    reader.step(_fields.decode(token_ids_message(rows)), where)


def test_a_finished_row_keeps_its_worker_until_the_end_is_certain() -> None:
    workers = WorkerMap()
    reader = SglangReader(Positions(builtin()), 512, 4096, frozenset(), workers)
    read(reader, [{"rid": "a", "ids": [5, 6], "ipc": W0},
                  {"rid": "b", "ids": [7], "ipc": W1}], {})
    assert workers.of(["a", "b", "c"]) == [W0, W1, None]
    # both finish: the rows are read, the shard has not yet acknowledged them
    read(reader, [{"rid": "a", "ids": [8], "completion": 3, "ipc": W0,
                   "finish": {"type": "length", "length": 3}},
                  {"rid": "b", "ids": [9], "completion": 2, "ipc": W1,
                   "finish": {"type": "length", "length": 2}}], {"a": 0, "b": 0})
    assert workers.of(["a", "b"]) == [W0, W1]  # a shard dying now fails them there
    workers.ended(["a"])  # the egress: a's end acknowledged
    assert workers.of(["a", "b"]) == [None, W1]
    assert workers.route("b", last=True) == W1 and len(workers) == 0


def test_a_reused_rid_takes_its_new_worker() -> None:
    workers = WorkerMap()
    workers.note(["a"], [W0])
    workers.note(["a", "b"], [W1, None])  # a new life of "a", from the other worker
    assert workers.of(["a", "b"]) == [W1, None]
    assert workers.route("a", last=False) == W1 and workers.of(["a"]) == [W1]


def test_an_ending_leaves_the_window_only_after_its_output_left_the_shard() -> None:
    """The egress forgets a request's worker when its ending leaves the ledger's window:
    acknowledged, and `keep` more output messages sent since, so its last delta cannot
    still be in the dead shard's queue (before that a death fails it again, to its
    worker)."""
    from egress.router import Ledger, Live

    ledger = Ledger(keep=2)
    ledger.add((1, [("a", Live(0))], 0))
    ledger.add((2, [("b", Live(0))], 0))
    assert [rid for rid, _ in ledger.ack(2, sent=10)] == ["a", "b"]  # acknowledged ...
    assert ledger.take_gone() == []  # ... but their deltas may wait in the output queue
    ledger.ack(2, sent=11)
    assert ledger.take_gone() == []
    ledger.ack(2, sent=12)  # two more output messages since: both have left
    assert ledger.take_gone() == ["a", "b"] and ledger.take_gone() == []
