"""The egress <-> shard link alone: its messages, the journal, and each end of the link
run as a real process against a test standing at the other end (sockets only: the test
plays a shard, a supervisor or a frontend, never patches the process it drives, except
where a bug is injected on purpose)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from egress.journal import Journal, replay
from ring import link
from ring.sockets import make_socket
from sglang_tok.config import Config
from sglang_tok.finish import Length
from sglang_tok.kit.sync_frontend import Frontend
from sglang_tok.process import Status, service_roles
from sglang_tok.protocols.model import batch as native_batch
from sglang_tok.protocols.model import control, deltas, errors
from sglang_tok.protocols.model.interface import LATE
from sglang_tok.ragged import small_ints, u32s

SPAWN = mp.get_context("spawn")


# --------------------------------------------------------------------------- messages
def test_every_link_message_parses_to_its_struct_without_copying_the_frame() -> None:
    sparse = link.Sparse(counts=np.array([2, 1], np.uint32).tobytes(), new=[(1, "b", 7, 2)],
                         ends=[(0, Length(), 5, 0, 1)])
    msg = link.arrays(12.5, np.array([4, 9], np.uint32), np.array([1, 2, 3], np.int64), sparse)
    got = link.parse(msg)
    assert isinstance(got, link.Arrays) and got.stamp == 12.5 and got.sparse == sparse
    assert got.slots.tolist() == [4, 9] and got.ids.tolist() == [1, 2, 3]
    assert got.ids.base is not None  # a view of the message, not a copy
    frame = control.encode_control(control.Open("a"))
    msg = link.forward(1.0, frame)
    fwd = link.parse(msg)
    assert isinstance(fwd, link.Frame) and bytes(fwd.frame) == frame and fwd.frame.obj is msg
    assert link.parse(link.drop("why", ["a", "b"])) == link.Drop("why", ["a", "b"])
    assert link.parse(link.sync(2**40 + 3)) == link.Sync(2**40 + 3)
    assert link.parse(link.START) == link.Start() and link.parse(link.EXIT) == link.Exit()
    with pytest.raises(ValueError):
        link.parse(b"?")


def test_notices_round_trip_and_drain_carries_an_absolute_deadline() -> None:
    for note in (link.Hello(1, 2, 3), link.EndedNotice(0, ["a"]), link.Ack(1, 9, 4, 3, 77, [("a", 2, 0)]),
                 link.ShardDown(2, 77), link.Drain(123.25)):
        assert link.notice_decoder.decode(link.notice_encoder.encode(note)) == note


# --------------------------------------------------------------------------- journal
def test_journal_replays_open_rids_ignores_a_torn_tail_and_compacts(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j = Journal(path)
    j.write(opened=["a", "b", "c"])
    j.write(ended=["b", "never-opened"])
    j.write(opened=["d"], ended=["a"])
    assert list(replay(path)) == ["c", "d"]
    with open(path, "ab") as f:  # the writer died in the middle of a record
        f.write(b"\x40\x00\x00\x00\x92\x91")
    assert list(replay(path)) == ["c", "d"]
    j = Journal(path, replay(path))  # a replacement starts from what was left open
    for n in range(40000):
        j.write(opened=[f"r{n}"])
        j.write(ended=[f"r{n}"])
    assert path.stat().st_size < 2 << 20 and list(replay(path)) == ["c", "d"]
    j.close()
    assert not path.exists() and replay(path) == {}


def test_journal_takes_a_rid_ended_twice_in_one_write(tmp_path: Path) -> None:
    """Found by test_kit_client under load: a rid ended, OPENed again and ended again
    before its shard's acknowledgement names both ends; the egress died on a KeyError."""
    path = tmp_path / "j"
    j = Journal(path)
    j.write(opened=["a", "b"])
    j.write(ended=["a", "a", "b"])
    assert replay(path) == {} and j.live == {}
    j.close()


# --------------------------------------------------------------------------- harness
def config(tmp: Path, shards: int = 1, **kw: Any) -> Config:
    rt = tmp / "rt"
    rt.mkdir(mode=0o700)
    return Config(shards=shards, runtime_dir=str(rt), input=f"ipc://{rt}/input.ipc",
                  output=f"ipc://{rt}/output.ipc", pin=False, **kw)


class Peer:
    """The test's sockets at the far end of the link (ZeroMQ lets either side go first)."""

    def __init__(self, cfg: Config, ctx: zmq.Context) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.socks: list[zmq.Socket] = []

    def sock(self, kind: int, endpoint: str, bind: bool, hwm: int = 1000) -> zmq.Socket:
        s = make_socket(self.ctx, kind, endpoint, bind=bind, hwm=hwm, linger_ms=0)
        self.socks.append(s)
        return s

    def close(self) -> None:
        for s in self.socks:
            s.close(linger=0)


def recv_notice(sock: zmq.Socket, kind: type, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sock.poll(100):
            note = link.notice_decoder.decode(sock.recv())
            if isinstance(note, kind):
                return note
    raise TimeoutError(f"no {kind.__name__}")


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    c = zmq.Context()
    yield c
    c.destroy(linger=0)  # a failed test's open sockets must not hang the teardown


# --------------------------------------------------------------------------- shard
def _shard_with_bug(cfg: Config, status: Any, method: str, parent: int) -> None:
    from shards.main import main
    from shards.messages import table

    def bug(*_: Any) -> None:
        raise RuntimeError("injected bug")
    setattr(table.RidTable, method, bug)
    main(cfg, status, 0, None, parent)


@pytest.mark.parametrize("method,frame", [
    ("on_open", control.encode_control(control.Open("x", stop=["!"]))),
    ("on_error", control.encode_control(control.Error("x", "scheduler failed it"))),
    ("on_abort", control.encode_control(control.Abort(["x"]))),
])
def test_a_control_message_that_hits_a_bug_ends_its_rid(tmp_path: Path, ctx: zmq.Context,
                                                        method: str, frame: bytes) -> None:
    cfg = config(tmp_path)
    peer = Peer(cfg, ctx)
    inbox = peer.sock(zmq.PUSH, cfg.ipc("shard-0.ipc"), bind=True)
    back = peer.sock(zmq.PULL, cfg.ipc("back.ipc"), bind=True)
    front = Frontend(cfg.output, ctx)
    proc = SPAWN.Process(target=_shard_with_bug, args=(cfg, Status(len(service_roles(cfg.shards))), method,
                                                       os.getpid()))
    proc.start()
    try:
        inbox.send(link.sync(5))
        assert recv_notice(back, link.Hello).token == 5
        inbox.send(link.START)
        if method != "on_open":  # a live rid: one row, then the message that hits the bug
            inbox.send(link.arrays(0.0, np.array([0], np.uint32), np.array([100], np.int64),
                                   link.Sparse(new=[(0, "x", 0, 0)])))
        inbox.send(link.forward(0.0, frame))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (front.requests.get("x") and
                                                   front.requests["x"].finished):
            front.poll(0.1)
        out = front.requests["x"]
        assert out.finished and out.last.error == "internal detokenizer error"
    finally:
        proc.kill()
        proc.join()
        front.close()
        peer.close()


# --------------------------------------------------------------------------- egress
def start_egress(cfg: Config) -> Any:
    from egress.main import main
    proc = SPAWN.Process(target=main, args=(cfg, Status(len(service_roles(cfg.shards))),
                                            None, False))
    proc.start()
    return proc


def drain(peer: Peer, within_s: float) -> zmq.Socket:
    ctl = peer.sock(zmq.PUSH, peer.cfg.ipc("egress-ctl.ipc"), bind=False)
    ctl.send(link.notice_encoder.encode(link.Drain(time.monotonic() + within_s)))
    return ctl


def test_egress_with_a_shard_that_never_connects_still_drains(tmp_path: Path,
                                                              ctx: zmq.Context) -> None:
    """SYNC waits in the link's queue, not in a loop: the drain is served."""
    cfg = config(tmp_path, drain_timeout=30.0)
    peer = Peer(cfg, ctx)
    proc = start_egress(cfg)
    try:
        sched = peer.sock(zmq.PUSH, cfg.input, bind=False)
        sched.send(native_batch.encode_batch([{"rid": "r", "ids": [1]}]))
        time.sleep(0.5)
        drain(peer, 1.0)
        proc.join(10)
        assert proc.exitcode == 0
    finally:
        proc.kill()
        proc.join()
        peer.close()


def test_egress_drain_ends_by_the_deadline_in_the_drain_message(tmp_path: Path,
                                                                ctx: zmq.Context) -> None:
    """A shard that says hello and then reads nothing: the EXIT cannot go, and the egress
    still exits by the supervisor's deadline, not by a clock of its own (30 s here)."""
    cfg = config(tmp_path, drain_timeout=30.0, link_capacity=4)
    peer = Peer(cfg, ctx)
    proc = start_egress(cfg)
    try:
        inbox = peer.sock(zmq.PULL, cfg.ipc("shard-0.ipc"), bind=False, hwm=1)
        back = peer.sock(zmq.PUSH, cfg.ipc("back.ipc"), bind=False)
        token = link.parse(inbox.recv())
        assert isinstance(token, link.Sync)
        back.send(link.notice_encoder.encode(link.Hello(0, 4242, token.token)))
        sched = peer.sock(zmq.PUSH, cfg.input, bind=False)
        for n in range(50):  # fills the link and the egress's queue: the shard reads none
            sched.send(native_batch.encode_batch([{"rid": f"r{n}", "ids": [1]}]), zmq.NOBLOCK)
        time.sleep(0.5)
        t0 = time.monotonic()
        drain(peer, 1.5)
        proc.join(10)
        assert proc.exitcode == 0 and time.monotonic() - t0 < 5
    finally:
        proc.kill()
        proc.join()
        peer.close()


def test_egress_gives_up_on_a_frontend_that_reads_nothing(tmp_path: Path,
                                                          ctx: zmq.Context) -> None:
    """Its PONGs cannot go: past --heartbeat-timeout each is dropped and the loop goes on."""
    cfg = config(tmp_path, drain_timeout=30.0, link_capacity=2, heartbeat_timeout=0.5)
    peer = Peer(cfg, ctx)
    peer.sock(zmq.PULL, cfg.output, bind=True, hwm=1)  # bound, never read
    proc = start_egress(cfg)
    try:
        sched = peer.sock(zmq.PUSH, cfg.input, bind=False)
        for n in range(40):
            sched.send(control.encode_control(control.Ping(n + 1)))
        time.sleep(0.5)
        drain(peer, 1.0)
        proc.join(40 * 0.5 + 10)
        assert proc.exitcode == 0
    finally:
        proc.kill()
        proc.join()
        peer.close()


# --------------------------------------------------------------------------- frontend
def test_frontend_drops_and_counts_deltas_after_a_terminal_one(tmp_path: Path,
                                                               ctx: zmq.Context) -> None:
    """Protocol section 5, rule 7: the first terminal delta ends a rid."""
    front = Frontend(f"ipc://{tmp_path}/f.ipc", ctx)
    try:
        front.add(-1, deltas.terminal("r", errors.SHARD_RESTARTED,
                                        deltas.Usage(0, 0, 0, 0, 0)))
        front.add(0, deltas.Delta("r", text="stale"))
        front.add(0, deltas.Delta("r", text="", finish=Length()))
        assert front.late == 2 and not front.violations
        assert front.requests["r"].last.error == errors.SHARD_RESTARTED
    finally:
        front.close()


def test_a_dead_shards_late_ack_settles_nothing_of_its_replacement(tmp_path: Path) -> None:
    """A killed shard's last Acks can be read after the supervisor's ShardDown (two
    sockets, no common order): they must not acknowledge its replacement's endings, nor
    hold the ledger's window open with an output count the replacement will not reach."""
    from prometheus_client import REGISTRY

    from egress.main import Egress

    def fresh_metrics() -> None:
        for c in list(REGISTRY._collector_to_names):
            REGISTRY.unregister(c)

    fin = {"type": "length", "length": 2}
    fresh_metrics()
    eg = Egress(config(tmp_path), Status(len(service_roles(1))))
    try:
        ledger = eg.router.ledgers[0]
        eg.pids[0], eg.up[0], eg.synced[0] = 111, True, True
        eg.on_frame(memoryview(native_batch.encode_batch([{"rid": "a", "ids": [1, 2],
                                                         "finish": fin}])))
        eg.on_notice(link.ShardDown(0, 111))  # "a" is failed with the shard
        eg.pids[0], eg.up[0], eg.synced[0] = 222, True, True  # its replacement said Hello
        eg.on_frame(memoryview(native_batch.encode_batch([{"rid": "b", "ids": [3, 4],
                                                         "finish": fin}])))
        eg.on_notice(link.Ack(0, 999, 10**6, eg.token, 111, []))  # the dead one's, late
        assert len(ledger.unacked) == 1 and not ledger.acks
        eg.on_notice(link.Ack(0, 1, 1, eg.token, 222, [("b", 2, 0)]))
        assert not ledger.unacked and list(ledger.acks) == [(1, 1)]
        for n in range(5):  # PINGs: acks with no output in between are kept as one
            eg.on_notice(link.Ack(0, 2 + n, 1, eg.token, 222, []))
        assert list(ledger.acks) == [(6, 1)]
    finally:
        eg.ctx.destroy(linger=0)
        fresh_metrics()


# --------------------------------------------------------------------------- columns
@pytest.mark.parametrize("values", [[], [0, 1, 255, 3], [0, 256, 1], [70000, 0], [-1, 2]])
def test_header_columns_read_fast_equal_what_numpy_reads(values: list[int]) -> None:
    """`small_ints` reads a count column through `bytes` when it can; any count takes it."""
    got = small_ints(values)
    assert got.dtype == np.int64 and got.tolist() == values


def test_route_codes_read_as_uint32_and_refuse_what_does_not_fit() -> None:
    codes = [0, 255, (1 << 24) * 3 + 2, LATE]
    assert u32s(codes).tolist() == codes
    with pytest.raises(OverflowError):
        u32s([1 << 32])


@pytest.mark.parametrize("nshards", [1, 2, 3])
def test_split_gives_each_shard_its_rows_in_order_and_an_ended_rids_rows_to_none(
        nshards: int) -> None:
    """Route codes are slot * nshards + shard (with one shard, the slot): each shard's
    message holds exactly its rows, in frame order, with their slots and ids; the rows of
    a rid that has ended (LATE) reach no shard."""
    from egress.router import shard_of
    from sglang_tok.kit.scheduler import encode_step
    from sglang_tok_testkit.local_route import LocalRoute

    route = LocalRoute(nshards)
    rids = [f"r{i}" for i in range(14)]

    def frame(names: list[str], base: int) -> native_batch.Batch:
        rows = [[base + int(r[1:]), base + 100 + int(r[1:])] if r == "r5" else [base + int(r[1:])]
                for r in names]
        return native_batch.decode_batch(encode_step(names, rows))

    def parts(batch: native_batch.Batch) -> dict[int, link.Arrays]:
        out = {}
        for k, raw in route(batch).items():
            msg = link.parse(raw)
            assert isinstance(msg, link.Arrays)
            out[k] = msg
        return out

    first = parts(frame(rids, 1000))
    slot_of: dict[str, int] = {}
    for k in range(nshards):
        mine = [r for r in rids if shard_of(r, nshards) == k]
        msg = first[k]
        assert [rid for _, rid, _, _ in msg.sparse.new] == mine
        slot_of.update(zip(mine, msg.slots.tolist()))
        assert len(set(msg.slots.tolist())) == len(mine)
        want = [i for r in mine for i in ([1005, 1105] if r == "r5" else [1000 + int(r[1:])])]
        assert msg.ids.tolist() == want
    route.end("r3")
    later = ["r9", "r3", "r5", "r0"]
    second = parts(frame(later, 2000))
    for k, msg in second.items():
        mine = [r for r in later if r != "r3" and shard_of(r, nshards) == k]
        assert msg.slots.tolist() == [slot_of[r] for r in mine] and not msg.sparse.new
        assert msg.ids.tolist() == [i for r in mine
                                    for i in ([2005, 2105] if r == "r5" else [2000 + int(r[1:])])]
    assert set(second) == {shard_of(r, nshards) for r in later if r != "r3"}
