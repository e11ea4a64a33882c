"""The real service: real processes, real ZeroMQ sockets, driven as a scheduler would."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_service import LocalService

from sglang_tok.finish import ABORT, Length
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
from sglang_tok.protocols.model import batch, errors
from sglang_tok.tokenizer import TokenizerInfo, load

INFO: TokenizerInfo = load("deepseek-v4")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """One service for the tests below that take it, in file order: each leaves it healthy
    (a killed process is back before the test ends), uses rids of its own, and reads
    counters as differences, so what an earlier test did shows in none of them."""
    svc = LocalService(tmp_path_factory.mktemp("service"), shards=2).start()
    yield svc
    svc.stop()


def run_plan(svc: LocalService, spec: PlanSpec) -> list:
    reqs = make_requests(INFO, spec)
    for step in schedule(reqs, spec.concurrency, spec.seed):
        for f in step.opens:
            svc.send(f)
        if step.batch is not None:
            svc.send(step.batch)
        for f in step.ends:
            svc.send(f)
        svc.front.poll(0)
    svc.barrier()
    return reqs


def test_thousands_of_interleaved_requests_are_exact(service: LocalService) -> None:
    spec = PlanSpec(requests=2000, concurrency=256, ids_per_row=(1, 3), min_tokens=4,
                    max_tokens=40, logprob_share=0.1, stop_share=0.15, options_share=0.3,
                    special_share=0.2, abort_share=0.03, error_share=0.02, prompt_share=0.2,
                    seed=7)
    reqs = run_plan(service, spec)
    problems = [p for r in reqs for p in verify(r, service.front.requests.get(r.rid), INFO)]
    assert not problems, problems[:10]
    assert not service.front.violations, service.front.violations[:10]
    shards = {service.front.requests[r.rid].shard for r in reqs}
    assert shards == {0, 1}
    m = service.metrics()
    assert m['sglang_tok_live_requests{shard="0"}'] + m['sglang_tok_live_requests{shard="1"}'] == 0
    # every request that had a row was counted on its path, most on the array path
    by_path = {k: v for k, v in m.items() if k.startswith("sglang_tok_requests_by_path_total")}
    array = sum(v for k, v in by_path.items() if 'path="array"' in k)
    assert array > 0.5 * sum(by_path.values()) and len(by_path) > 2


def test_logprobs_and_texts_reach_the_frontend(service: LocalService) -> None:
    ids = INFO.tokenizer.encode("Hello 世界").ids
    service.sched.open("lp", logprob_text=True)  # type: ignore[union-attr]
    row = {"rid": "lp", "ids": ids, "finish": {"type": "length", "length": len(ids)},
           "output_logprobs": [[-0.5, t] for t in ids],
           "output_top": [[[-0.5, t], [-1.5, 7]] for t in ids]}
    service.send(batch.encode_batch([row]))
    service.barrier()
    d = service.front.requests["lp"].last
    assert d.text == "Hello 世界"
    assert d.logprobs == [[-0.5, t] for t in ids]
    assert d.top_logprobs == [[[t, -0.5], [7, -1.5]] for t in ids]
    assert d.token_texts == [INFO.tokenizer.decode([t], skip_special_tokens=False) for t in ids]
    assert d.top_texts == [[INFO.token_text(t), INFO.token_text(7)] for t in ids]


def test_malformed_frame_is_dropped_whole_and_its_rids_fail(service: LocalService) -> None:
    ids = INFO.tokenizer.encode("good text").ids
    good = batch.encode_batch([{"rid": "good", "ids": ids[:1]}, {"rid": "victim", "ids": ids[:1]}])
    service.send(good)
    bad = bytearray(batch.encode_batch([{"rid": "victim", "ids": ids[1:2]},
                                           {"rid": "bystander", "ids": ids[1:2]}]))
    service.send(bytes(bad[:-3]))  # data buffer too short
    service.send(b"\x7fjunk")  # unknown tag
    service.send(batch.encode_batch([{"rid": "good", "ids": ids[1:],
                                         "finish": {"type": "length", "length": 9}},
                                        {"rid": "victim", "ids": ids[1:]}]))
    service.barrier()
    front = service.front.requests
    assert front["good"].text == "good text" and isinstance(front["good"].last.finish, Length)
    for rid in ("victim", "bystander"):
        last = front[rid].last
        assert last.error == errors.MALFORMED_FRAME and last.finish == ABORT
    # the victim's later row is ignored: nothing after its terminal delta
    assert not service.front.violations
    assert front["victim"].text == INFO.tokenizer.decode(ids[:1])
    m = service.metrics()
    assert m['sglang_tok_frames_dropped_total{reason="data_length"}'] == 1
    assert m['sglang_tok_frames_dropped_total{reason="unknown_tag"}'] == 1
    assert service.health()[0] == 200


def start_streams(svc: LocalService, requests: int, seed: int) -> tuple[list, list]:
    """Requests of 30 ids each, all running: the first 10 steps sent and delivered."""
    spec = PlanSpec(requests=requests, concurrency=requests, min_tokens=30, max_tokens=30,
                    seed=seed)
    reqs = make_requests(INFO, spec)
    steps = list(schedule(reqs, spec.concurrency, seed))
    for step in steps[:10]:
        svc.send(step.batch)  # type: ignore[arg-type]
    svc.barrier()
    return reqs, steps


def test_kill_shard_mid_stream_fails_its_rids_and_comes_back(service: LocalService) -> None:
    restarts = service.metrics().get('sglang_tok_restarts_total{role="shard"}', 0.0)
    reqs, steps = start_streams(service, 200, 3)
    victim = service.kill(1)
    for step in steps[10:]:  # rows for the dead shard's rids, sent while it is down
        service.send(step.batch)  # type: ignore[arg-type]
    service.wait_back(1, victim)
    service.barrier()
    failed = ok = 0
    for r in reqs:
        out = service.front.requests[r.rid]
        if out.last.error == errors.SHARD_RESTARTED:
            assert out.shard in (0, -1)
            failed += 1
        else:
            assert not verify(r, out, INFO)
            ok += 1
    assert failed > 0 and ok > 0 and failed + ok == len(reqs)
    assert not service.front.violations, service.front.violations[:5]
    # the new shard 0 serves new requests exactly
    reqs2 = run_plan(service, PlanSpec(requests=50, concurrency=50, seed=11))
    assert not [p for r in reqs2 for p in verify(r, service.front.requests[r.rid], INFO)]
    assert service.metrics()['sglang_tok_restarts_total{role="shard"}'] == restarts + 1


def test_frontend_that_stops_reading_gets_backpressure_not_loss(tmp_path: Path) -> None:
    import zmq

    from sglang_tok.kit.client import Scheduler
    from sglang_tok.kit.sync_frontend import Frontend
    svc = LocalService(tmp_path, shards=1, args=["--link-capacity", "2"], ring_capacity=2).start()
    try:
        svc.front.sock.close(linger=0)  # the frontend stops reading (nothing was sent yet)
        svc.sched.close()  # type: ignore[union-attr]
        svc.sched = Scheduler(svc.input, hwm=1, sndtimeo_ms=500)
        reqs = make_requests(INFO, PlanSpec(requests=512, concurrency=512, min_tokens=400,
                                            max_tokens=400, seed=5))
        steps = [s.batch for s in schedule(reqs, 512, 5)]
        sent = 0
        for b in steps:
            try:
                svc.sched.send(b)  # type: ignore[arg-type]
                sent += 1
            except zmq.Again:
                break
        assert sent < len(steps), "the service never pushed back"
        assert svc.health()[0] == 200  # blocked, not broken
        # the frontend comes back on the same endpoint: every delta of every frame arrives
        svc.front = Frontend(svc.output)
        svc.sched.sock.setsockopt(zmq.SNDTIMEO, -1)
        for b in steps[sent:]:
            svc.sched.send(b)  # type: ignore[arg-type]
            svc.front.poll(0)
        svc.barrier()
        bad = [p for r in reqs for p in verify(r, svc.front.requests.get(r.rid), INFO)]
        assert not bad, bad[:5]
        m = svc.metrics()
        assert m['sglang_tok_frames_total{tag="batch"}'] == len(steps)
    finally:
        svc.stop()


def test_sigterm_under_load_delivers_every_accepted_row(tmp_path: Path) -> None:
    svc = LocalService(tmp_path, shards=2).start()
    reqs = make_requests(INFO, PlanSpec(requests=300, concurrency=300, min_tokens=20,
                                        max_tokens=20, seed=9))
    steps = list(schedule(reqs, 300, 9))
    for step in steps:
        svc.send(step.batch)  # type: ignore[arg-type]
    svc.sched.close()  # type: ignore[union-attr]
    svc.sched = None
    time.sleep(0.2)
    # to the whole process group, as a terminal or systemd would: children wait for the
    # supervisor's drain instead of dying with frames in hand
    os.killpg(svc.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
    rc = svc.proc.wait(20)  # type: ignore[union-attr]
    svc.front.poll(1.0)
    while svc.front.poll(0.5):
        pass
    try:
        assert rc == 0, svc.logs()
        bad = [p for r in reqs for p in verify(r, svc.front.requests.get(r.rid), INFO)]
        assert not bad, bad[:5]
    finally:
        svc.stop()


def test_health_metrics_and_deep_probe(service: LocalService) -> None:
    ids = INFO.tokenizer.encode("count these tokens please").ids
    frames = [
        [{"rid": "m1", "ids": ids[:2], "prompt_tokens": 100, "cached_tokens": 40},
         {"rid": "m2", "ids": ids[:1], "prompt_tokens": 10, "cached_tokens": 0}],
        [{"rid": "m1", "ids": ids[2:3], "prompt_tokens": 100, "cached_tokens": 40},
         {"rid": "m2", "ids": ids[1:2], "prompt_tokens": 10, "cached_tokens": 0,
          "finish": {"type": "length", "length": 2}}],
    ]
    before = service.metrics()
    for rows in frames:
        service.send(batch.encode_batch(rows))
    service.barrier()
    after = service.metrics()

    def m(name: str) -> float:
        return after[name] - before.get(name, 0.0)
    lab = '{engine="0",model_name="deepseek-v4"}'
    # frame 1: 3 new ids + (100 - 40) + (10 - 0) = 73; frame 2: 2 new ids
    assert m(f"sglang:iteration_tokens_total_count{lab}") == 2
    assert m(f"sglang:iteration_tokens_total_sum{lab}") == 75
    def b(le: str) -> float:
        return m(f'sglang:iteration_tokens_total_bucket{{engine="0",le="{le}",model_name="deepseek-v4"}}')
    assert b("1.0") == 0 and b("8.0") == 1 and b("64.0") == 1 and b("128.0") == 2
    assert b("16384.0") == 2 and b("+Inf") == 2
    code, h = service.health()
    assert code == 200 and h["status"] == "ok" and h["activity"] >= 3
    code, body = service.get("/health?deep=1")
    assert code == 200, body
    import subprocess
    import sys
    rc = subprocess.run([sys.executable, "-m", "sglang_tok.serving.cli", "health", "--deep", "--http",
                         f"127.0.0.1:{service.port}"], capture_output=True, timeout=30).returncode
    assert rc == 0
    assert service.get("/nope")[0] == 404


def test_kill_egress_mid_stream_fails_live_rids_and_comes_back(service: LocalService) -> None:
    reqs, steps = start_streams(service, 100, 13)
    service.wait_back(0, service.kill(0))
    # every request that was live is ended by its shard with an error; none hangs
    service.barrier()
    for r in reqs:
        out = service.front.requests[r.rid]
        assert out.finished and out.last.error == errors.EGRESS_RESTARTED, r.rid
        end = out.service_end  # the service's own, not only the frontend's (section 5.3)
        assert end is not None and end.error == errors.EGRESS_RESTARTED, r.rid
    # late rows of those requests are ignored; a rid first seen right after the restart
    # may have lost its first rows with the old egress: it fails instead of going on
    for step in steps[10:12]:
        service.send(step.batch)  # type: ignore[arg-type]
    ids = INFO.tokenizer.encode("fresh").ids
    service.send(batch.encode_batch([{"rid": "grace-new", "ids": ids}]))
    service.barrier()
    assert service.front.requests["grace-new"].last.error == errors.EGRESS_RESTARTED
    assert not service.front.violations, service.front.violations[:5]
    time.sleep(3.2)  # past --restart-grace: new requests are served exactly
    reqs2 = run_plan(service, PlanSpec(requests=50, concurrency=50, seed=17))
    assert not [p for r in reqs2 for p in verify(r, service.front.requests[r.rid], INFO)]
    assert not service.front.violations, service.front.violations[:5]


def test_shard_killed_while_the_frontend_lags_ends_each_rid_once(service: LocalService) -> None:
    """The dead shard's deltas still in socket buffers race the egress's errors for its
    rids (protocol section 5, rule 7): the frontend keeps the first terminal delta and
    drops what follows; the egress holds its errors so that little follows (without the
    hold this run dropped 700 stale deltas, with it 0)."""
    late = service.front.late
    reqs, steps = start_streams(service, 200, 21)
    for step in steps[10:20]:  # the frontend reads nothing while these are decoded
        service.send(step.batch)  # type: ignore[arg-type]
    time.sleep(1.0)
    victim = service.kill(1)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:  # then it reads slowly, one message at a time
        if service.front.sock.poll(3):
            service.front.take(service.front.sock.recv())
        time.sleep(0.003)
    for step in steps[20:]:
        service.send(step.batch)  # type: ignore[arg-type]
    service.wait_back(1, victim)
    service.barrier()
    assert not service.front.violations, service.front.violations[:5]
    outs = [service.front.requests[r.rid] for r in reqs]
    assert all(o.finished for o in outs)
    failed = [o for o in outs if o.last.error == errors.SHARD_RESTARTED]
    assert failed and service.front.late - late < 200, (len(failed), service.front.late)


def test_each_shard_start_is_logged_once(service: LocalService) -> None:
    """Once per shard process and egress: a shard or an egress that an earlier test
    killed is started again, and each egress logs the shards it meets."""
    service.barrier()
    logs = service.log_path.read_text()
    for life in logs.split(" restarted egress as pid "):
        for k in range(service.shards):
            pids = re.findall(rf"shard {k} \(pid (\d+)\) started", life)
            assert len(pids) == len(set(pids)), logs[-3000:]
    last = re.findall(r"shard 0 \(pid (\d+)\) started", logs)[-1]
    assert service.child_pid(1) == int(last)  # slot 1: shard 0


def test_the_harness_takes_the_shard_count_from_the_service(tmp_path: Path) -> None:
    """A `--shards` among the flags passed through to `serve` wins there; the harness must
    barrier on the PONGs of every shard the service runs, as its /health reports them
    (issue 19: `faults.py --service-args "--shards 4"` waited for 2 and judged too early)."""
    svc = LocalService(tmp_path, shards=1, args=["--shards", "3"]).start()
    try:
        assert svc.shards == 3 == svc.health()[1]["shards"]
        spec = PlanSpec(requests=60, concurrency=30, seed=19)
        reqs = make_requests(INFO, spec)
        last_shard = svc.child_pid(3)  # slot k + 1 is shard k
        os.kill(last_shard, signal.SIGSTOP)  # well under --heartbeat-timeout
        try:
            svc.send_steps(schedule(reqs, spec.concurrency, spec.seed))
            with pytest.raises(TimeoutError):
                svc.barrier(timeout=1.0)  # shard 2 cannot answer: no barrier yet
        finally:
            os.kill(last_shard, signal.SIGCONT)
        svc.barrier()
        problems = [p for r in reqs for p in verify(r, svc.front.requests.get(r.rid), INFO)]
        assert not problems, problems[:10]
        assert {svc.front.requests[r.rid].shard for r in reqs} == {0, 1, 2}
    finally:
        svc.stop()
