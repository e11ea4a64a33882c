"""The integration kit against the real service: the writer's steps in, the asyncio client out."""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang_tok.finish import ABORT, Length, Stop
from sglang_tok.kit.client import (
    IDLE_TIMEOUT_ERROR,
    QUEUE_LIMIT_ERROR,
    Client,
    RequestStream,
)
from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.scheduler import Scheduler
from sglang_tok.kit.sync_frontend import RequestOutput
from sglang_tok.kit.workload import (
    PlannedRequest,
    PlanSpec,
    expected,
    make_requests,
    schedule,
    verify,
)
from sglang_tok.protocols.model import deltas as native_deltas
from sglang_tok.protocols.model import errors, output, packed
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo, load


@pytest.fixture(scope="module")
def info() -> TokenizerInfo:
    return load("deepseek-v4")


@pytest.fixture(scope="module", params=["deltas", "columnar", "packed"])
def svc(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[LocalService]:
    s = LocalService(tmp_path_factory.mktemp(f"kit-{request.param}"), shards=2, frontend=False,
                args=["--output-format", request.param]).start()
    yield s
    s.stop()


@contextlib.asynccontextmanager
async def connected(svc: LocalService, **kw: Any) -> AsyncIterator[Client]:
    """A Client bound where the previous test's closed: ready before anything is sent, or
    what the service sends before it notices the old one is gone would be lost."""
    async with Client(svc.output, svc.shards, **kw) as client:
        assert svc.sched is not None and await client.ready(svc.sched.ping)
        yield client


def run(coro) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(asyncio.wait_for(coro, 120))


def scheduler_loop(sched: Scheduler, reqs: list[PlannedRequest]) -> None:
    """A scheduler's steps: every live request's next chunk, as array('q'), in one BATCH."""
    for r in reqs:
        if r.opts is not None:
            sched.open(r.rid, **{f: getattr(r.opts, f) for f in r.opts.__struct_fields__[1:]})
    steps = max(len(r.chunks) for r in reqs)
    for k in range(steps):
        live = [r for r in reqs if k < len(r.chunks)]
        sched.step([r.rid for r in live], [array("q", r.chunks[k]) for r in live],
                   finish_reasons=[r.finish if k == len(r.chunks) - 1 else None for r in live],
                   prompt_tokens=[r.prompt_tokens for r in live],
                   cached_tokens=[r.cached_tokens for r in live])


async def consume(stream: RequestStream) -> list[Delta]:
    return [d async for d in stream]


def test_each_stream_is_exact_and_ends_at_its_terminal_delta(svc: LocalService,
                                                              info: TokenizerInfo) -> None:
    reqs = make_requests(info, PlanSpec(requests=120, min_tokens=4, max_tokens=40,
                                        ids_per_row=(1, 3), stop_share=0.2, prompt_share=0.2,
                                        seed=11), prefix="exact")

    async def main() -> None:
        async with connected(svc) as client:
            streams = [client.stream(r.rid) for r in reqs]
            tasks = [asyncio.create_task(consume(s)) for s in streams]
            assert svc.sched is not None
            scheduler_loop(svc.sched, reqs)
            assert await client.barrier(svc.sched.ping, 30)
            outs = await asyncio.gather(*tasks)
            for r, out in zip(reqs, outs):
                text, fin = expected(r, info)
                assert "".join(d.text for d in out) == text, r.rid
                assert out[-1].finish == fin and all(d.finish is None for d in out[:-1])
            assert client.stats.unknown == 0 and client.stats.seq_gaps == 0
            assert not client.streams  # every ended stream released

    run(main())


def test_logprobs_their_texts_and_usage_reach_each_stream(svc: LocalService,
                                                         info: TokenizerInfo) -> None:
    """Every output format, logprobs on half the requests, options (logprob texts,
    continuous usage, stream false...) on most: each stream's deltas carry what the oracle
    checks (logprob ids, token and top texts, usage on every delta), also when a PACKED
    message's logprobs are read per row by the stream's consumer."""
    reqs = make_requests(info, PlanSpec(requests=80, concurrency=40, min_tokens=4,
                                        max_tokens=30, ids_per_row=(1, 3), logprob_share=0.5,
                                        options_share=0.6, seed=12), prefix="lp")

    async def main() -> None:
        async with connected(svc) as client:
            sched = svc.sched
            assert sched is not None
            tasks = {r.rid: asyncio.create_task(consume(client.stream(r.rid))) for r in reqs}
            for step in schedule(reqs, 40, 12):
                for frame in [*step.opens, *([step.batch] if step.batch else []), *step.ends]:
                    sched.send(frame)
            assert await client.barrier(sched.ping, 30)
            problems = []
            for r in reqs:
                problems += verify(r, RequestOutput(r.rid, 0, await tasks[r.rid], True), info)
            assert not problems, problems[:5]
            assert sum(r.logprobs for r in reqs) > 20

    run(main())


def test_later_deltas_for_an_ended_rid_are_dropped_and_counted(svc: LocalService) -> None:
    async def main() -> None:
        async with connected(svc) as client:
            sched = svc.sched
            assert sched is not None
            s = client.stream("late-1")
            sched.step(["late-1"], [[100, 200]], finish_reasons=[{"type": "length", "length": 2}])
            # the scheduler reuses the rid (an OPEN, protocol rule 6) but the frontend never
            # registered it again: those deltas are late for it, dropped and counted
            sched.open("late-1")
            sched.step(["late-1"], [[300]])
            sched.step(["late-1"], [[400]], finish_reasons=[{"type": "length", "length": 2}])
            assert await client.barrier(sched.ping, 30)
            got = await consume(s)
            assert [d.ids for d in got] == [[100, 200]] and got[-1].finish is not None
            assert client.stats.late == 2
            # a new registration (a new OPEN) takes the rid again
            again = client.stream("late-1")
            sched.open("late-1")
            sched.step(["late-1"], [[500]], finish_reasons=[{"type": "length", "length": 1}])
            assert [d.ids for d in await consume(again)] == [[500]]

    run(main())


def test_a_slow_consumer_ends_its_own_request_not_the_others(svc: LocalService) -> None:
    abandoned: list[str] = []

    async def main() -> None:
        sched = svc.sched
        assert sched is not None

        def abort(rid: str) -> None:
            abandoned.append(rid)
            sched.abort(rid)  # what the service sees: an ABORT, then the rid is freed

        async with connected(svc, queue_limit=8, on_abandon=abort) as client:
            slow, fast = client.stream("slow-1"), client.stream("fast-1")
            fast_task = asyncio.create_task(consume(fast))
            for k in range(30):
                last = k == 29
                fin = {"type": "length", "length": 30} if last else None
                sched.step(["slow-1", "fast-1"], [[1000 + k], [2000 + k]],
                           finish_reasons=[None, fin])
                await asyncio.sleep(0.005)
            assert await client.barrier(sched.ping, 30)
            fast_out = await fast_task
            assert [i for d in fast_out for i in d.ids] == list(range(2000, 2030)), fast_out[:3]
            slow_out = await consume(slow)  # the consumer wakes up late: its request ended
            assert len(slow_out) == 1 and slow_out[0].error == QUEUE_LIMIT_ERROR
            assert slow_out[0].finish == ABORT
            assert client.stats.overflowed == 1 and abandoned == ["slow-1"]
            assert await client.barrier(sched.ping, 30)
            assert client.stats.late >= 1  # the rest of its rows, and the ABORT's last delta

    run(main())


def test_a_silent_request_times_out_and_the_barrier_still_works(svc: LocalService) -> None:
    async def main() -> None:
        async with connected(svc, idle_timeout=0.3) as client:
            got = await consume(client.stream("silent-1"))
            assert len(got) == 1 and got[0].error == IDLE_TIMEOUT_ERROR
            assert client.stats.timed_out == 1
            assert svc.sched is not None
            assert await client.barrier(svc.sched.ping, 30)
            assert not await client.barrier(lambda: 10**9, 0.3)  # nobody answers that nonce

    run(main())


def test_a_client_bound_again_where_one_closed_loses_nothing_once_ready(svc: LocalService) -> None:
    """A frontend restarting on the same endpoint: what the service sends before it notices
    the old socket is gone dies in the dead connection (seen without `ready`: one PING in
    ten lost its PONGs). After `ready`, every delta of every request arrives."""
    async def main() -> None:
        sched = svc.sched
        assert sched is not None
        for k in range(25):
            async with connected(svc) as client:
                s = client.stream(f"again-{k}")
                sched.step([f"again-{k}"], [[100, 200]],
                           finish_reasons=[{"type": "length", "length": 2}])
                assert await client.barrier(sched.ping, 30)
                assert [d.ids for d in await consume(s)] == [[100, 200]]

    run(main())


def test_the_client_connects_when_it_is_not_the_binding_side(tmp_path: Path) -> None:
    """bind=False: something else binds (a proxy); the client connects to it."""
    import zmq

    from sglang_tok.protocols.model.deltas import Deltas, encode_deltas

    async def main() -> None:
        ep = f"ipc://{tmp_path}/proxy.ipc"
        ctx = zmq.Context.instance()
        push = ctx.socket(zmq.PUSH)
        push.bind(ep)
        async with Client(ep, shards=0, bind=False) as client:
            s = client.stream("p-1")
            push.send(encode_deltas(Deltas(0, 0, [Delta("p-1", "hi", [1]),
                                                  Delta("p-1", "!", [2], finish=Stop())])))
            assert "".join(d.text for d in await consume(s)) == "hi!"
        push.close(0)

    run(main())


def test_an_egress_restart_ends_every_stream_in_flight(tmp_path: Path) -> None:
    """Protocol section 5.3, frames as the service sends them: after the egress's
    RESTARTED each open stream gets what already came, then the egress-restarted error;
    a shard's RESTARTED only starts its seq again."""
    from sglang_tok.protocols.model.control import Restarted, encode_restarted
    from sglang_tok.protocols.model.deltas import Deltas, encode_deltas

    abandoned: list[str] = []

    async def main() -> None:
        client = Client(f"ipc://{tmp_path}/out.ipc", 2, on_abandon=abandoned.append)
        try:
            said, silent, done = (client.stream(r) for r in ("said", "silent", "done"))
            client.dispatch(encode_deltas(Deltas(0, 0, [
                Delta("said", text="hi"),
                Delta("done", text="ok", finish=Length(1))])))
            client.dispatch(encode_restarted(Restarted(0, 99)))  # shard 0 replaced
            client.dispatch(encode_deltas(Deltas(0, 0, [Delta("said", text=" there")])))
            assert client.stats.seq_gaps == 0 and client.stats.ended_by_restart == 0
            client.dispatch(encode_restarted(Restarted(-1, 100)))  # the egress replaced
            client.dispatch(encode_deltas(Deltas(1, 0, [Delta("silent", text="stale")])))
            got = await consume(said)
            assert [d.text for d in got] == ["hi", " there", ""]
            assert got[-1].error == errors.EGRESS_RESTARTED
            quiet = await consume(silent)
            assert len(quiet) == 1 and quiet[0].error == errors.EGRESS_RESTARTED
            assert [d.text for d in await consume(done)] == ["ok"]
            assert client.stats.ended_by_restart == 2 and client.stats.restarts == 2
            assert client.stats.late == 1 and sorted(abandoned) == ["said", "silent"]
        finally:
            await client.close()

    run(main())


def test_packed_rows_read_lazily_are_the_messages_deltas(tmp_path: Path, info: TokenizerInfo) -> None:
    """The client queues a PACKED message's running rows as (message, row) and makes each
    Delta when it is read: what a consumer reads equals the message's Deltas, logprobs,
    finishes and usage included, row for row."""
    from sglang_tok.kit.workload import PlanSpec, make_requests, schedule
    from sglang_tok_testkit.local_route import LocalRoute
    from shards.decoders import decoders_for
    from shards.messages.table import RidTable

    spec = PlanSpec(requests=80, concurrency=30, ids_per_row=(1, 3), min_tokens=2,
                    max_tokens=20, logprob_share=0.3, stop_share=0.1, options_share=0.2,
                    abort_share=0.05, seed=4)
    reqs = make_requests(info, spec)
    route, table = LocalRoute(1), RidTable(info, 0, decoders=decoders_for(info, min_rows=1))
    client = Client(f"ipc://{tmp_path}/c.ipc", 1, queue_limit=1 << 20)
    streams = {r.rid: client.stream(r.rid) for r in reqs}
    expected: dict[str, list[Delta]] = {}
    for step in schedule(reqs, spec.concurrency, spec.seed):
        for f in [*step.opens, *([step.batch] if step.batch else []), *step.ends]:
            sink = output.output_sink("packed")
            route.feed(f, [table], [sink])
            if len(sink):
                raw = output.encode_output("packed", 0, client.stats.messages, sink)
                msg = output.decode_output(raw)
                assert isinstance(msg, packed.Packed)
                for d in msg.deltas:
                    expected.setdefault(d.rid, []).append(d)
                client.dispatch(raw)
    got = {rid: s.ready() for rid, s in streams.items()}
    client.sock.close(linger=0)
    assert {rid: ds for rid, ds in got.items() if ds} == expected
    assert client.stats.deltas == sum(map(len, expected.values())) > 300



def test_a_last_row_on_the_fast_route_closes_its_stream_to_later_rows(tmp_path: Path) -> None:
    """PACKED rows go to their queues in one pass and a last row marks its stream done:
    a later message naming that rid, before or after the consumer read the end, delivers
    the other rows and counts the ended rid's row late; a new registration takes it again."""
    client = Client(f"ipc://{tmp_path}/c.ipc", 1, queue_limit=1 << 20)
    a, b = client.stream("a"), client.stream("b")
    seq = iter(range(100))

    def send(*deltas: Delta) -> None:
        client.dispatch(output.encode_output("packed", 0, next(seq), list(deltas)))

    usage = native_deltas.Usage(3, 2, 5, 0, 0)
    send(Delta("a", "x", [1]), Delta("b", "y", [2]))
    send(Delta("a", "z", [3], finish=Length(), usage=usage), Delta("b", "w", [4]))
    send(Delta("a", "late", [5]), Delta("b", "v", [6]))  # the end of `a` is not read yet
    assert client.stats.late == 1
    got_a = a.ready()
    assert [(d.text, d.finish) for d in got_a] == [("x", None), ("z", Length())]
    assert got_a[-1].usage == usage
    send(Delta("a", "later", [7]), Delta("b", "u", [8], finish=Stop()))
    assert client.stats.late == 2
    assert [d.text for d in b.ready()] == ["y", "w", "v", "u"] and "b" not in client.streams
    again = client.stream("a")
    send(Delta("a", "new", [9]))
    assert [d.text for d in again.ready()] == ["new"] and client.stats.late == 2
    client.sock.close(linger=0)
