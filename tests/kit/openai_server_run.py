"""The example OpenAI server run for a test module (`running_server`), and what the tests
read back from it, shared by the server's tests and its tests with parsers on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

SERVER = Path(__file__).resolve().parents[2] / "examples" / "openai_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_server(log_dir: Path, *args: str) -> Iterator[str]:
    """`python examples/openai_server.py --port PORT ARGS...` until /health answers; its
    base URL; SIGTERM (then SIGKILL of its group) on the way out."""
    port = free_port()
    log = open(log_dir / "server.log", "wb+")
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), *args],
                            stdout=log, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"server did not start:\n{log.read().decode()[-4000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()


def generated(base: str, cid: str) -> dict[str, Any]:
    r = httpx.get(f"{base}/debug/requests/{cid}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def oai(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
