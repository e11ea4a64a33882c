"""The supervisor alone, with trivial children (tests/service/supervisor_children.py): restarts
with backoff, the cap per window, stuck and boot-hung children killed, the drain."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import supervisor_children as kids

from sglang_tok.process import Status
from sglang_tok.serving.arbiter import Child, ExitCode, Restart, Supervisor, Timeouts

pytestmark = pytest.mark.timeout(90)
DEFAULT_RESTART = Restart()


def lines(where: Path, name: str) -> list[float]:
    path = where / name
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def sigterm_when(cond: Callable[[], bool], timeout: float = 60.0) -> threading.Thread:
    """SIGTERM this process (the supervisor under test) once `cond` holds."""
    def run() -> None:
        deadline = time.monotonic() + timeout
        while not cond() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def drain_into(where: Path) -> Callable[[float], None]:
    """The drain signal of these children: a `drain` file holding the deadline, put in place
    whole (a child that sees the file at once reads it at once: written in place, it could
    be read empty)."""
    def drain(deadline: float) -> None:
        (where / "drain.tmp").write_text(str(deadline))
        os.replace(where / "drain.tmp", where / "drain")
    return drain


def child(target: Callable[..., None], args: tuple[object, ...], holds_data: bool = True,
          restart: Restart = DEFAULT_RESTART, slot: int = 0) -> Child:
    return Child(f"kid {slot}", slot, target, args, holds_data=holds_data, restart=restart)


def test_restart_backs_off_and_the_cap_per_window_stops_the_service(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    status = Status(1)
    policy = Restart(limit=3, window=60.0, first=0.3, cap=0.5)
    sup = Supervisor([child(kids.die_young, (status, 0, str(tmp_path), 99), restart=policy)],
                     status, Timeouts())
    with caplog.at_level(logging.INFO, "sglang_tok.serving.supervisor"):
        code = sup.run()
    assert code == ExitCode.RESTART_LIMIT
    starts, exits = lines(tmp_path, "starts-0"), lines(tmp_path, "exits-0")
    assert len(starts) == 4 and len(exits) == 4  # the first start and 3 restarts
    # each restart waits its backoff after the death: 0.3 s, then 0.6 s capped at 0.5 s
    gaps = [start - exit_ for exit_, start in zip(exits, starts[1:])]
    assert all(gap >= want for gap, want in zip(gaps, [0.3, 0.5, 0.5])), gaps
    assert "--restart-limit 3" in caplog.text and "--restart-window 60" in caplog.text


def test_deaths_spread_wider_than_the_window_do_not_stop_the_service(tmp_path: Path) -> None:
    status = Status(1)
    # one restart per 0.2 s window, and every restart comes 0.4 s after its death
    policy = Restart(limit=1, window=0.2, first=0.4, cap=0.4)
    sup = Supervisor([child(kids.die_young, (status, 0, str(tmp_path), 3), restart=policy)],
                     status, Timeouts(drain=5.0), drain=drain_into(tmp_path))
    sigterm_when(lambda: len(lines(tmp_path, "starts-0")) == 4 and status.beat(0) > 0)
    assert sup.run() == ExitCode.OK
    assert len(lines(tmp_path, "starts-0")) == 4


def test_stale_heartbeat_gets_sigabrt_with_a_stack_dump(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    status = Status(1)
    never_again = Restart(limit=0)
    sup = Supervisor([child(kids.wedge, (status, 0, str(tmp_path), False), restart=never_again)],
                     status, Timeouts(heartbeat=0.5))
    with caplog.at_level(logging.INFO, "sglang_tok.serving.supervisor"):
        assert sup.run() == ExitCode.RESTART_LIMIT
    assert "missed heartbeats" in caplog.text
    assert f"exited with code {-signal.SIGABRT}" in caplog.text
    stacks = "".join(p.read_text() for p in tmp_path.glob("stack-*"))
    assert "stuck_in_a_loop_that_never_beats" in stacks and "wedge" in stacks


def test_stale_child_that_ignores_sigabrt_gets_sigkill_after_the_grace(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    status = Status(1)
    sup = Supervisor([child(kids.wedge, (status, 0, str(tmp_path), True),
                            restart=Restart(limit=0))],
                     status, Timeouts(heartbeat=0.5, abort_grace=0.5))
    with caplog.at_level(logging.INFO, "sglang_tok.serving.supervisor"):
        assert sup.run() == ExitCode.RESTART_LIMIT
    assert f"exited with code {-signal.SIGKILL}" in caplog.text


def test_boot_hang_is_killed_and_stops_the_service_with_the_boot_exit_code(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    status = Status(2)
    sup = Supervisor([child(kids.serve, (status, 0, str(tmp_path), True)),
                      child(kids.hang_at_boot, (status, 1, str(tmp_path)), slot=1)],
                     status, Timeouts(boot=5.0), drain=drain_into(tmp_path))
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, "sglang_tok.serving.supervisor"):
        assert sup.run() == ExitCode.BOOT_FAILURE == 3
    assert time.monotonic() - t0 < 30
    assert "kid 1 failed at boot (sent no heartbeat within 5s of its spawn)" in caplog.text
    stacks = "".join(p.read_text() for p in tmp_path.glob("stack-*"))
    assert "hang_at_boot" in stacks
    assert lines(tmp_path, "drained-0"), "the healthy child was drained, not killed"


def test_sigterm_drains_data_holders_by_one_deadline_then_stops_the_rest(
        tmp_path: Path) -> None:
    status = Status(2)
    deadlines: list[float] = []

    def drain(deadline: float) -> None:
        deadlines.append(deadline)
        drain_into(tmp_path)(deadline)

    sup = Supervisor([child(kids.serve, (status, 0, str(tmp_path), True)),
                      child(kids.serve, (status, 1, str(tmp_path), False), holds_data=False,
                            slot=1)],
                     status, Timeouts(drain=10.0), drain=drain)
    sigterm_when(lambda: status.beat(0) > 0 and status.beat(1) > 0)
    assert sup.run() == ExitCode.OK
    assert len(deadlines) == 1 and lines(tmp_path, "drained-0") == deadlines
    holder, other = (r.proc for r in sup.running)
    assert holder is not None and holder.exitcode == 0  # it ignored SIGTERM and drained
    assert other is not None and other.exitcode == -signal.SIGTERM
    assert time.monotonic() < deadlines[0]


def test_data_holder_that_does_not_drain_is_killed_at_the_deadline(tmp_path: Path) -> None:
    status = Status(1)
    sup = Supervisor([child(kids.serve, (status, 0, str(tmp_path), True))], status,
                     Timeouts(drain=0.5))  # nobody tells it to drain
    sigterm_when(lambda: status.beat(0) > 0)
    assert sup.run() == ExitCode.OK
    (holder,) = (r.proc for r in sup.running)
    assert holder is not None and holder.exitcode == -signal.SIGKILL


def test_a_child_refusing_a_flag_at_boot_stops_the_service_with_the_config_code(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An endpoint taken between the supervisor's check and the child's bind: one line
    naming the flag, exit code 2, the others stopped."""
    status = Status(2)
    sup = Supervisor([child(kids.refuse_flag, (status, 0, str(tmp_path))),
                      child(kids.serve, (status, 1, str(tmp_path), False), holds_data=False,
                            slot=1)], status, Timeouts(drain=1.0, stop_grace=1.0))
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, "sglang_tok.serving.supervisor"):
        assert sup.run() == ExitCode.CONFIG
    assert "kid 0 refused a flag's value (the error above)" in caplog.text
    assert sup.running[0].proc is None and sup.running[0].spec.role == "kid 0"
    other = sup.running[1].proc
    assert other is not None and not other.is_alive()
    assert time.monotonic() - t0 < 30


def test_the_arbiter_knows_nothing_of_the_service() -> None:
    """The generic layer imports no process folder: which children the service has is
    sglang_tok/serving/service.py's to say."""
    import subprocess
    import sys
    probe = ("import sys, sglang_tok.serving.arbiter; "
             "print(sorted({m.split('.')[0] for m in sys.modules} "
             "& {'ring', 'egress', 'shards', 'zmq'} | {m for m in sys.modules "
             "if m.startswith('sglang_tok.encoders')}))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
