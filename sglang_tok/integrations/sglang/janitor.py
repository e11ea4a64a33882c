"""The janitor: removes the service's runtime directory once `sglang-tok serve` is gone,
however it went. Started by the launcher, one per service.

`serve --remove-runtime-dir` removes the directory itself on every stop it lives through.
It cannot after SIGKILL, and SGLang's shutdown and crash paths SIGKILL it:
`kill_process_tree` SIGKILLs every descendant of SGLang's launcher process, and on a
crash (SIGQUIT from a child) the launcher itself too, so no process of that tree is left
to clean up. The janitor is outside the tree: it forks, the launcher reaps the parent at
once, and the child (orphaned, in a session of its own) waits on a pidfd of the service's
supervisor, removes the directory, and exits. It imports nothing but the standard library
and holds no pipe of the launcher's.

    python -m sglang_tok.integrations.sglang.janitor PIDFD DIR
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys


def start_detached() -> None:
    """Leave the caller's process tree: fork (the caller reaps the parent, which exits at
    once), a session of its own (no terminal's ^C or hangup), no inherited stdio."""
    if os.fork():
        os._exit(0)
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def wait_gone(pidfd: int) -> None:
    """Until the process exits (a pidfd reads ready then; its pid cannot be reused while
    the fd is open)."""
    while True:
        try:
            if select.select([pidfd], [], [])[0]:
                return
        except InterruptedError:  # pragma: no cover - retried by Python since 3.5
            continue


def main(argv: list[str]) -> None:
    pidfd, directory = int(argv[0]), argv[1]
    start_detached()
    wait_gone(pidfd)
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
