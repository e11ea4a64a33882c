"""The frontend side of the integration kit: receive deltas, one stream per request.

`Client` is the asyncio client (zmq.asyncio; runs on uvloop): it binds (or connects) the
output endpoint, decodes every output frame (`frames.decode_frame`), and hands each
request's deltas to that request's async iterator, which ends with the request's first
terminal delta (protocol section 5: a later delta for that rid is dropped and counted until
the rid is registered again). One slow consumer cannot stall the others: past `queue_limit`
undelivered deltas its request is ended with an error delta (and `on_abandon` is called, so
the caller can send ABORT). No request waits forever: past `idle_timeout` seconds without a
delta, the same. `barrier()` is the PING/PONG barrier; `ready()` waits until every service
process's output reaches this socket (a frontend bound again where another closed). When
the egress is replaced (RESTARTED, protocol section 5.3), every request in flight ends with
the egress-restarted error: rows of some of them may have died with the old egress unseen,
so only the frontend can end them.

`Scheduler` (re-exported from `sglang_tok.kit.scheduler`) is the other half. The
synchronous `Frontend` that tests and scripts use is the harness's
(`sglang_tok.kit.sync_frontend`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import filterfalse, repeat
from operator import attrgetter
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from ring.sockets import BoundFile, make_socket
from sglang_tok.protocols.model import deltas as native_deltas
from sglang_tok.protocols.model import errors
from sglang_tok.protocols.model.control import Pong, Restarted
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.protocols.model.tags import EGRESS
from sglang_tok.security import Curve

from .frames import PackedRows, decode_frame
from .scheduler import Scheduler

__all__ = ["Client", "ClientStats", "RequestStream", "Scheduler", "decode_frame"]

QUEUE_LIMIT_ERROR = "frontend queue limit exceeded"
IDLE_TIMEOUT_ERROR = "frontend idle timeout"
ENDED_MEMORY = 65536  # ended rids remembered, as the shards do (--ended-memory)
_RID = attrgetter("rid")
_FINISH = attrgetter("finish")
_QUEUE = attrgetter("_queue")
_consume = deque[Any](maxlen=0).extend  # runs an iterator to its end at C speed
_WAITER = attrgetter("_waiter")


class _Row(msgspec.Struct, array_like=True, gc=False):
    """A queued row of a PACKED message, not yet read. Untracked by the garbage collector:
    a queue of thousands of them must not make every collection walk them."""

    rows: Any
    r: int


def _delta(item: Delta | _Row) -> Delta:
    if isinstance(item, _Row):
        return item.rows.delta(item.r)
    return item


@dataclass
class ClientStats:
    messages: int = 0
    deltas: int = 0
    late: int = 0  # deltas for a rid after its terminal delta: dropped
    unknown: int = 0  # deltas for a rid nobody registered: dropped
    overflowed: int = 0  # requests ended by the queue limit
    timed_out: int = 0  # requests ended by the idle timeout
    bad_frames: int = 0
    seq_gaps: int = 0
    restarts: int = 0  # RESTARTED notices (any process)
    ended_by_restart: int = 0  # requests ended because the egress was replaced


class RequestStream:
    """One request's deltas, in order, ending with its first terminal delta."""

    __slots__ = ("rid", "_client", "_queue", "_waiter", "_done", "_ended")

    def __init__(self, rid: str, client: Client) -> None:
        self.rid = rid
        self._client = client
        # Deltas, or (message, row) of a PACKED message not yet read (see `PackedRows`)
        self._queue: deque[Delta | _Row] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._done = False  # the terminal delta is queued: nothing more is accepted
        self._ended = False  # the iterator has returned the terminal delta

    def _put(self, d: Delta) -> bool:
        """Queue a delta; False once the stream takes no more (the caller counts it)."""
        if self._done:
            return False
        if len(self._queue) >= self._client.queue_limit and d.finish is None:
            self._client.stats.overflowed += 1
            self._fail(QUEUE_LIMIT_ERROR)
            return False
        self._queue.append(d)
        if d.finish is not None:
            self._mark_done()
        self._wake()
        return True

    def _mark_done(self) -> None:
        """Nothing more is accepted; the client's demultiplexer learns it from its set of
        done rids (one set test per message instead of a flag read per row)."""
        self._done = True
        client = self._client
        if client.streams.get(self.rid) is self:
            client._done_rids.add(self.rid)

    def _fail(self, error: str, keep_queued: bool = False) -> None:
        """End the request here: ahead of anything still queued when the consumer is
        behind, after it when what came is good (the egress was replaced)."""
        if not keep_queued:
            self._queue.clear()
        self._queue.append(native_deltas.terminal(self.rid, error,
                                                  native_deltas.Usage(0, 0, 0, 0, 0)))
        self._mark_done()
        self._wake()
        self._client._abandon(self.rid)

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Delta:
        if self._ended:
            raise StopAsyncIteration
        q = self._queue
        if not q:
            loop = asyncio.get_running_loop()
            self._waiter = loop.create_future()
            try:
                async with asyncio.timeout(self._client.idle_timeout):
                    await self._waiter
            except TimeoutError:
                if not q:
                    self._client.stats.timed_out += 1
                    self._fail(IDLE_TIMEOUT_ERROR)
            finally:
                self._waiter = None
        d = _delta(q.popleft())
        if d.finish is not None:
            self._ended = True
            self._client._release(self)
        return d

    def ready(self) -> list[Delta]:
        """Every delta already queued, without waiting (a consumer that writes them out in
        one go); the stream ends here if its terminal delta is among them."""
        out: list[Delta] = []
        q = self._queue
        while q and not self._ended:
            d = _delta(q.popleft())
            out.append(d)
            if d.finish is not None:
                self._ended = True
                self._client._release(self)
        return out

    async def collect(self) -> list[Delta]:
        return [d async for d in self]

    def close(self) -> None:
        """Stop listening (the caller went away): later deltas for the rid are dropped."""
        if not self._ended:
            self._done = self._ended = True
            self._queue.clear()
            self._client._release(self)


class Client:
    """The asyncio frontend: one socket, one reader task, one `RequestStream` per rid.

    Register a rid with `stream(rid)` before its OPEN or first row reaches the service;
    deltas for a rid that is not registered are dropped and counted (`stats.unknown`).
    """

    def __init__(self, endpoint: str, shards: int, *, bind: bool = True,
                 queue_limit: int = 4096, idle_timeout: float | None = 60.0,
                 on_abandon: Callable[[str], None] | None = None, hwm: int = 100000,
                 curve: Curve | None = None, ctx: zmq.asyncio.Context | None = None) -> None:
        self.shards = shards
        self._processes = set(range(-1, shards))
        self.queue_limit = queue_limit
        self.idle_timeout = idle_timeout
        self.on_abandon = on_abandon
        self.stats = ClientStats()
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.sock: Any = make_socket(self.ctx, zmq.PULL, endpoint, bind=bind, hwm=hwm,
                                     linger_ms=0, curve=curve)
        self._file = BoundFile(endpoint if bind else "")
        self.streams: dict[str, RequestStream] = {}
        # rids whose registered stream has its terminal delta queued (not yet read)
        self._done_rids: set[str] = set()
        self._ended: dict[str, None] = {}  # insertion-ordered: the oldest goes first
        self._pongs: dict[int, tuple[set[int], asyncio.Future[None]]] = {}
        self._seqs: dict[int, int] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Client:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start(self) -> None:
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    def stream(self, rid: str) -> RequestStream:
        """Register a rid (again, after its last delta: a new OPEN) and get its iterator."""
        old = self.streams.get(rid)
        if old is not None and not old._ended:
            raise ValueError(f"rid {rid!r} is already streaming")
        self._ended.pop(rid, None)
        self._done_rids.discard(rid)
        s = self.streams[rid] = RequestStream(rid, self)
        return s

    def _release(self, s: RequestStream) -> None:
        """Forget an ended stream, but remember its rid (bounded) so later deltas count late."""
        if self.streams.get(s.rid) is s:
            del self.streams[s.rid]
            self._done_rids.discard(s.rid)
            ended = self._ended
            ended[s.rid] = None
            if len(ended) > ENDED_MEMORY:
                del ended[next(iter(ended))]

    def _abandon(self, rid: str) -> None:
        if self.on_abandon is not None:
            self.on_abandon(rid)

    async def _read(self) -> None:
        recv, pause = self.sock.recv, asyncio.sleep
        while True:
            raw = await recv(copy=True)
            self.dispatch(raw)
            # A recv that finds a message queued returns without yielding: after a backlog
            # the consumers must get their turn between messages, or a burst of a shard
            # catching up would count against their queue limit.
            await pause(0)

    def dispatch(self, raw: bytes) -> None:
        """Route one output frame (the reader task calls this; public for tests)."""
        stats = self.stats
        stats.messages += 1
        try:
            msg = decode_frame(raw, lazy=True)
        except (ValueError, errors.FrameError):
            stats.bad_frames += 1
            return
        if isinstance(msg, Pong):
            self._pong(msg)
            return
        if isinstance(msg, Restarted):
            self._restarted(msg)
            return
        shard, seq, deltas = msg
        if self._seqs.get(shard, seq) != seq:
            stats.seq_gaps += 1
        self._seqs[shard] = seq + 1
        if isinstance(deltas, PackedRows):
            stats.deltas += len(deltas.msg.rids)
            for d in self._deliver_packed(deltas):
                self._deliver(d)
            return
        stats.deltas += len(deltas)
        for d in self._deliver_running(deltas):
            self._deliver(d)

    def _open_queues(self, rids: list[str]) -> tuple[list[RequestStream], list[Any]] | None:
        """The streams of these rids and their queues, when each is registered, distinct,
        still open and has room in its queue (what lets a message's rows be queued by
        `map`), else None. One pass per check, each at C speed."""
        try:
            streams = list(map(self.streams.__getitem__, rids))
        except KeyError:
            return None
        distinct = set(rids)
        if len(distinct) != len(rids) or not self._done_rids.isdisjoint(distinct):
            return None
        queues = list(map(_QUEUE, streams))
        if queues and max(map(len, queues)) >= self.queue_limit:
            return None
        return streams, queues

    @staticmethod
    def _queue_all(streams: list[RequestStream], queues: list[Any], items: Any) -> None:
        """Each item to its stream's queue at C speed; only waiting consumers are woken."""
        _consume(map(deque.append, queues, items))
        for s in filter(_WAITER, streams):
            s._wake()

    def _deliver_packed(self, rows: PackedRows) -> list[Delta]:
        """A PACKED message: every row goes to its queue as (message, row), made into a
        Delta only when read (`_delta`), so demultiplexing builds nothing per row; a last
        row's stream is then marked done. Returns the Deltas left for `_deliver` (as
        `_deliver_running` does): all of them when the fast route does not apply."""
        msg = rows.msg
        found = self._open_queues(msg.rids)
        if found is None:
            return rows.deltas()
        streams, queues = found
        self._queue_all(streams, queues, map(_Row, repeat(rows), range(len(queues))))
        for r, _ in msg.finish:
            streams[r]._mark_done()
        return []

    def _deliver_running(self, deltas: list[Delta]) -> list[Delta]:
        """The rows that do not end their request, at C speed, when each is of a distinct,
        registered, open stream with room in its queue. Returns what is left for
        `_deliver`, row by row: the last rows (after the others, so a rid's order holds),
        or the whole message if it is not of that kind."""
        ends = list(filter(_FINISH, deltas))
        running = list(filterfalse(_FINISH, deltas)) if ends else deltas
        found = self._open_queues(list(map(_RID, running)))
        if found is None:
            return deltas
        streams, queues = found
        if ends and not set(map(_RID, ends)).isdisjoint(map(_RID, running)):
            return deltas  # a rid with both kinds of row in one message: keep it simple
        self._queue_all(streams, queues, running)
        return ends

    def _deliver(self, d: Delta) -> None:
        s = self.streams.get(d.rid)
        stats = self.stats
        if s is None:
            if d.rid in self._ended:
                stats.late += 1
            else:
                stats.unknown += 1
        elif not s._put(d):
            stats.late += 1

    def _restarted(self, msg: Restarted) -> None:
        """Protocol section 5.3: after the egress's RESTARTED no request in flight can be
        trusted to get its last delta, so each ends here (and `on_abandon` is called, so
        the caller can ABORT it in the scheduler)."""
        self.stats.restarts += 1
        self._seqs.pop(msg.shard, None)
        if msg.shard != EGRESS:
            return
        for s in list(self.streams.values()):
            if not s._done:
                self.stats.ended_by_restart += 1
                s._fail(errors.EGRESS_RESTARTED, keep_queued=True)

    def _pong(self, p: Pong) -> None:
        entry = self._pongs.get(p.nonce)
        if entry is None:
            return
        got, fut = entry
        got.add(p.shard)
        if got >= self._processes and not fut.done():  # the egress (-1) and every shard
            fut.set_result(None)

    async def ready(self, ping: Callable[[], int], timeout: float = 30.0,
                    every: float = 0.1) -> bool:
        """Wait until every process's output reaches this socket: PING every `every` s,
        until some PONG has come from each.

        A client bound where another just closed (a restarted frontend, a test after a
        test) needs this before it relies on delivery: until a service process notices the
        old peer is gone, what it sends is written into that dead connection and lost.
        One PONG from a process through this socket means its output is connected here;
        all it sends after comes in order. `barrier` alone cannot tell: its one PING's
        PONGs may be among what is lost.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        got: set[int] = set()  # shared by every PING's entry: any PONG of a process counts
        nonces: list[int] = []
        deadline = loop.time() + timeout
        try:
            while True:
                nonce = ping()
                nonces.append(nonce)
                self._pongs[nonce] = (got, fut)
                left = deadline - loop.time()
                try:
                    await asyncio.wait_for(asyncio.shield(fut), max(0.0, min(every, left)))
                    return True
                except TimeoutError:
                    if loop.time() >= deadline:
                        return False
        finally:
            for nonce in nonces:
                self._pongs.pop(nonce, None)

    async def barrier(self, ping: Callable[[], int], timeout: float = 30.0) -> bool:
        """Send a PING with `ping` (e.g. `Scheduler.ping`); wait for every process's PONG.

        When it returns True, every delta of every frame sent before the PING has been
        dispatched to its stream.
        """
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        nonce = ping()
        self._pongs[nonce] = (set(), fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._pongs.pop(nonce, None)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
            self._reader = None
        self.sock.close(linger=0)
        self._file.remove()

