"""Trivial child targets for tests/service/test_supervisor.py: module-level, so `spawn` imports them.

Each writes what it lived through to files under `where`, the only channel a spawned
child and the test share besides the status block.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from pathlib import Path

from sglang_tok.process import Beat, Status, setup_child


def _note(where: str, name: str, line: str) -> None:
    with open(Path(where, name), "a") as f:
        f.write(line + "\n")


def _dump_stacks_to(where: str) -> None:
    """faulthandler writes the stack to a file the test reads (SIGABRT included)."""
    faulthandler.enable(open(Path(where, f"stack-{os.getpid()}"), "w"))


def serve(status: Status, slot: int, where: str, holds_data: bool) -> None:
    """Beat; one that holds data also exits 0 once told to drain (the `drain` file), after
    noting the deadline it was given; one that does not waits for SIGTERM."""
    setup_child("test child", "INFO", holds_data=holds_data)
    _note(where, f"starts-{slot}", f"{time.monotonic()}")
    _beat_until_drained(status, slot, where, holds_data)


def _beat_until_drained(status: Status, slot: int, where: str, watch: bool = True) -> None:
    beat = Beat(status, slot)
    while not (watch and Path(where, "drain").exists()):
        beat()
        time.sleep(0.02)
    _note(where, f"drained-{slot}", Path(where, "drain").read_text())


def die_young(status: Status, slot: int, where: str, deaths: int) -> None:
    """Beat once and die, `deaths` times over; after that, serve like `serve`."""
    setup_child("test child", "INFO")
    _note(where, f"starts-{slot}", f"{time.monotonic()}")
    if len(Path(where, f"starts-{slot}").read_text().split()) > deaths:
        return _beat_until_drained(status, slot, where)
    Beat(status, slot)()
    time.sleep(0.05)
    _note(where, f"exits-{slot}", f"{time.monotonic()}")
    os._exit(1)


def wedge(status: Status, slot: int, where: str, ignore_abort: bool) -> None:
    """Beat for a while, then stop beating while staying alive (a wedged loop)."""
    setup_child("test child", "INFO")
    _dump_stacks_to(where)
    if ignore_abort:
        signal.signal(signal.SIGABRT, signal.SIG_IGN)
    beat = Beat(status, slot)
    for _ in range(5):
        beat()
        time.sleep(0.02)
    stuck_in_a_loop_that_never_beats()


def stuck_in_a_loop_that_never_beats() -> None:
    while True:
        time.sleep(0.01)


def hang_at_boot(status: Status, slot: int, where: str) -> None:
    """Never send a first heartbeat (a tokenizer load that never returns)."""
    setup_child("test child", "INFO")
    _dump_stacks_to(where)
    stuck_in_a_loop_that_never_beats()


def refuse_flag(status: Status, slot: int, where: str) -> None:
    """Find a flag's endpoint taken at bind (since the supervisor checked it)."""
    setup_child("test child", "INFO")
    from sglang_tok.config import refusing
    with refusing("input", "tcp://127.0.0.1:5555"):
        raise OSError(98, "Address already in use")
