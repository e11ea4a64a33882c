"""Limits with clear errors, and faults: process kills, reconnects, refusals."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_service import LocalService

from sglang_tok.kit.client import Scheduler
from sglang_tok.kit.sync_frontend import Frontend, barrier, ready
from sglang_tok.protocols.model import batch, control, errors
from sglang_tok.tokenizer import load

INFO = load("deepseek-v4")
IDS = INFO.tokenizer.encode("limits hold").ids
FIN = {"type": "length", "length": 3}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    svc = LocalService(tmp_path_factory.mktemp("limits"), shards=1, args=[
        "--max-frame-bytes", "65536", "--max-rid-length", "16", "--max-row-ids", "8",
        "--max-requests", "3", "--max-stops", "2", "--max-stop-length", "5"]).start()
    yield svc
    svc.stop()


def test_rid_and_row_limits_drop_the_frame_and_name_the_limit(small: LocalService) -> None:
    small.send(batch.encode_batch([{"rid": "ok-a", "ids": IDS[:1]}, {"rid": "r" * 40, "ids": IDS[:1]}]))
    small.send(batch.encode_batch([{"rid": "ok-b", "ids": IDS[:1] * 9}]))
    small.barrier()
    front = small.front.requests
    assert front["ok-a"].last.error == errors.MALFORMED_FRAME
    assert front["ok-b"].last.error == errors.MALFORMED_FRAME
    m = small.metrics()
    assert m['sglang_tok_frames_dropped_total{reason="limit_rid_length"}'] == 1
    assert m['sglang_tok_frames_dropped_total{reason="limit_row_ids"}'] == 1
    assert "--max-rid-length 16" in small.logs() and "--max-row-ids 8" in small.logs()


def test_stop_limits_end_the_request_with_a_message_naming_them(small: LocalService) -> None:
    small.sched.open("st-1", stop=["a", "b", "c"])  # type: ignore[union-attr]
    small.sched.open("st-2", stop=["toolong"])  # type: ignore[union-attr]
    small.barrier()
    for rid in ("st-1", "st-2"):
        err = small.front.requests[rid].last.error or ""
        assert "--max-stops 2" in err and "--max-stop-length 5" in err


def test_max_requests_refuses_new_rids_and_evicts_nobody(small: LocalService) -> None:
    for n in range(3):
        small.send(batch.encode_batch([{"rid": f"cap-{n}", "ids": IDS[:1]}]))
    small.send(batch.encode_batch([{"rid": "cap-x", "ids": IDS[:1]}]))
    small.barrier()
    assert "--max-requests 3" in (small.front.requests["cap-x"].last.error or "")
    small.send(batch.encode_batch([{"rid": f"cap-{n}", "ids": IDS[1:], "finish": FIN}
                                      for n in range(3)]))
    small.barrier()
    for n in range(3):  # the live ones were never evicted
        out = small.front.requests[f"cap-{n}"]
        assert out.text == "limits hold" and not out.last.error
    assert small.metrics()['sglang_tok_rejected_requests_total{shard="0"}'] == 1


def test_oversized_frame_is_never_buffered_and_the_ring_goes_on(small: LocalService) -> None:
    """libzmq enforces --max-frame-bytes while reading: it drops the sender's connection."""
    big = batch.encode_batch([{"rid": "huge", "ids": [1] * 20000}])
    assert len(big) > 65536
    s = Scheduler(small.input)
    s.send(big)
    time.sleep(0.3)
    s.close()
    small.send(batch.encode_batch([{"rid": "after", "ids": IDS, "finish": FIN}]))
    small.barrier()
    assert "huge" not in small.front.requests
    assert small.front.requests["after"].text == "limits hold"
    assert small.health()[0] == 200


def test_scheduler_that_reconnects_and_frontend_that_restarts(small: LocalService) -> None:
    # a PING orders only the frames of its own connection: each scheduler pings for itself
    s1 = Scheduler(small.input)
    s1.send(batch.encode_batch([{"rid": "rc", "ids": IDS[:1]}]))
    assert barrier(s1, small.front, 1)
    s1.close()
    s2 = Scheduler(small.input)  # a new connection: the same ring, the same request
    s2.send(batch.encode_batch([{"rid": "rc", "ids": IDS[1:], "finish": FIN}]))
    assert barrier(s2, small.front, 1)
    s2.close()
    assert small.front.requests["rc"].text == "limits hold"
    # the frontend restarts on the same endpoint and gets what comes next
    small.front.close()
    small.front = Frontend(small.output)
    # what was in flight into the closing socket is the old frontend's loss; once the
    # service has reconnected (a PONG from each process), nothing more is lost
    assert ready(small.sched, small.front, 1)  # type: ignore[arg-type]
    small.send(batch.encode_batch([{"rid": "fr", "ids": IDS, "finish": FIN}]))
    small.barrier()
    assert small.front.requests["fr"].text == "limits hold"


def test_killed_http_process_comes_back(tmp_path: Path) -> None:
    svc = LocalService(tmp_path, shards=1).start()
    try:
        http = [q["pid"] for q in svc.health()[1]["processes"] if q["role"] == "http"]
        assert len(http) == 1 and http[0] in {p.pid for p in svc.children()}
        os.kill(http[0], signal.SIGKILL)
        (svc.runtime / "http.port").unlink()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if svc.health()[0] == 200:
                break
        else:
            pytest.fail("http did not come back:\n" + svc.logs())
        svc.barrier()
        assert "restarted http" in svc.logs()
        assert [q["pid"] for q in svc.health()[1]["processes"] if q["role"] == "http"] != http
    finally:
        svc.stop()


@pytest.mark.parametrize("gap_s", [0.0, 0.04])
def test_double_fault_shard_then_egress_leaves_no_request_waiting(tmp_path: Path,
                                                                  gap_s: float) -> None:
    """A shard dies, then the egress, before the shard's error deltas left it: the
    replacement egress finds the dead shard's rids in the journal and fails them."""
    from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
    svc = LocalService(tmp_path, shards=2).start()
    try:
        spec = PlanSpec(requests=120, concurrency=120, min_tokens=30, max_tokens=30, seed=4)
        reqs = make_requests(INFO, spec)
        steps = list(schedule(reqs, spec.concurrency, 4))
        for step in steps[:10]:
            svc.send(step.batch)  # type: ignore[arg-type]
        svc.barrier()
        shard = svc.kill(2)
        time.sleep(gap_s)
        egress = svc.kill(0)
        svc.wait_back(0, egress)
        svc.wait_back(2, shard)
        svc.barrier()
        lost = [r.rid for r in reqs if not (svc.front.requests.get(r.rid) and
                                            svc.front.requests[r.rid].finished)]
        assert not lost, (len(lost), svc.logs())
        # the service saw every one of them: it ends each itself, not only the frontend's
        # rule on the new egress's RESTARTED (protocol section 5.3)
        assert svc.front.ended_by_restart > 0
        unended = [r.rid for r in reqs if svc.front.requests[r.rid].service_end is None]
        assert not unended, (len(unended), svc.logs())
        wrong = [r.rid for r in reqs if not svc.front.requests[r.rid].last.error
                 and verify(r, svc.front.requests[r.rid], INFO)]
        assert not wrong and not svc.front.violations
    finally:
        svc.stop()


def test_requests_whose_every_frame_died_unread_in_the_egress_end(tmp_path: Path) -> None:
    """Frames the scheduler handed to an egress that died before reading them die with it,
    and no process ever learns their rids. The replacement's RESTARTED makes the frontend
    end every request in flight (protocol section 5.3); before it, these never ended."""
    svc = LocalService(tmp_path, shards=2).start()
    try:
        svc.barrier()
        egress = svc.child_pid(0)
        os.kill(egress, signal.SIGSTOP)  # it reads nothing more: frames wait in its socket
        rids = ["unseen-a", "unseen-b", "unseen-c"]
        for rid in rids:
            svc.front.register(rid)
            svc.send(batch.encode_batch([{"rid": rid, "ids": IDS, "finish": FIN}]))
        time.sleep(0.3)
        os.kill(egress, signal.SIGKILL)
        svc.wait_back(0, egress)
        svc.barrier()
        for rid in rids:
            out = svc.front.requests[rid]
            assert out.finished and out.last.error == errors.EGRESS_RESTARTED, rid
            # the service never saw it: nothing but the frontend's rule could end it
            assert out.by_frontend and out.late_finish is None and out.service_end is None
        assert [m.shard for m in svc.front.restarts] == [-1]
        assert svc.front.ended_by_restart == len(rids) and not svc.front.violations
        # registered after the notice: served as usual (OPENed, so not quarantined)
        svc.front.register("after")
        svc.send(control.encode_control(control.Open("after")))
        svc.send(batch.encode_batch([{"rid": "after", "ids": IDS, "finish": FIN}]))
        svc.barrier()
        after = svc.front.requests["after"]
        assert after.finished and after.text == "limits hold" and not after.by_frontend
    finally:
        svc.stop()


def test_a_shard_killed_before_its_queued_deltas_left_it_ends_those_requests(
        tmp_path: Path) -> None:
    """A shard acknowledges what it has processed, not what has left it: with the frontend
    behind, requests' last deltas can still sit in the shard's socket queue, after the egress
    has been told those requests ended, when the shard dies. They must end all the same."""
    svc = LocalService(tmp_path, shards=1, frontend=False)
    front = svc.front = Frontend(svc.output, hwm=1)  # once it stops reading, little is taken
    svc.start()
    try:
        svc.barrier()
        ids = IDS * 400  # ~10 KB per delta: the kernel's socket buffers fill first
        rids = [f"queued-{n}" for n in range(100)]
        for rid in rids:
            front.register(rid)
            svc.send(batch.encode_batch([{"rid": rid, "ids": ids, "finish": FIN}]))
        time.sleep(1.5)  # every frame processed and acknowledged; deltas wait in the shard
        victim = svc.kill(1)
        svc.wait_back(1, victim)
        svc.barrier()
        lost = [rid for rid in rids if not front.requests[rid].finished]
        assert not lost, (len(lost), svc.logs()[-3000:])
        failed = [rid for rid in rids if front.requests[rid].last.error]
        assert failed and all(front.requests[r].last.error == errors.SHARD_RESTARTED
                              for r in failed)
        assert not front.violations, front.violations[:5]
    finally:
        svc.stop()


def test_a_harness_killed_by_a_timeout_leaves_no_service_running(tmp_path: Path) -> None:
    """`LocalService` starts `serve --exit-with-parent`: when the process that started it dies
    without cleaning up (SIGKILL, a timeout), the service drains and exits on its own."""
    import signal
    import subprocess
    import sys

    import psutil

    code = ("import sys, time\n"
            "from pathlib import Path\n"
            "from sglang_tok.kit.local_service import LocalService\n"
            "s = LocalService(Path(sys.argv[1]), shards=1).start()\n"
            "print(s.proc.pid, flush=True)\n"
            "time.sleep(600)\n")
    harness = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        supervisor = psutil.Process(int(harness.stdout.readline()))
        family = [supervisor, *supervisor.children(recursive=True)]
        assert len(family) >= 3  # the supervisor, the egress, a shard (and http)
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)
        _, alive = psutil.wait_procs(family, timeout=30)
        assert not alive, [p.pid for p in alive]
    finally:
        harness.kill()
