"""A whole SGLang server of one release (0.5.12-0.5.23) with the stand-in scheduler and
SGLang's own detokenizer, and the streams it serves checked against the stand-in's
ledger: each finished text is the full decode of the ids the stand-in sent.

The release's SGLang is put ahead of SGLANG_PYTHON's own by PYTHONPATH: SGLANG_RELEASE_SITES
is a template of os.pathsep-separated folders, `{release}` in each filled in
(`/tmp/sgl-site-{release}`); a folder that does not exist is left out, and a release with
none runs on SGLANG_PYTHON's own SGLang when that is the release. This checkout comes
first, so the stand-in run is the one under test.

    python tests/sglang/standin_release.py 0.5.20 [0.5.13 ...]   # by hand: one line each
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sglang_tok.harness.sglang_side import model_dir  # noqa: E402
from sglang_tok.tokenizer import load_tokenizer  # noqa: E402

SITES_ENV = "SGLANG_RELEASE_SITES"
READY_IDS = [30602, 14, 2058]
RELEASES = [f"0.5.{n}" for n in range(12, 24)]
# the prompts each check sends: streaming and not, a stop string, a small max_new_tokens
ASKS: list[dict[str, Any]] = [
    {"text": "Once upon a time", "stream": True, "sampling_params": {"max_new_tokens": 64}},
    {"text": "The quick brown fox", "stream": True,
     "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}},
    {"text": "Hello world", "stream": False, "sampling_params": {"max_new_tokens": 48}},
    {"text": "A list of things", "stream": True,
     "sampling_params": {"max_new_tokens": 200, "stop": ["the"]}},
    {"text": "Numbers", "stream": True,
     "sampling_params": {"max_new_tokens": 100, "skip_special_tokens": False}},
    {"text": "Short", "stream": True, "sampling_params": {"max_new_tokens": 1}},
]


def release_path(release: str, python: str) -> str | None:
    """The PYTHONPATH that imports `release`'s SGLang (this checkout first), or None where
    it is not installed."""
    template = os.environ.get(SITES_ENV, "")
    sites = [p.replace("{release}", release) for p in template.split(os.pathsep) if p]
    sites = [p for p in sites if Path(p).is_dir()]
    path = os.pathsep.join([str(ROOT), *sites])
    probe = subprocess.run([python, "-c", "import sglang; print(sglang.__version__)"],
                           env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0 or probe.stdout.strip() != release:
        return None
    return path


class Server:
    """`python -m sglang.launch_server` of a release, the stand-in in the scheduler's place
    and SGLang's own detokenizer (`SGLANG_PLUGINS=sglang_tok_standin`; `env` may say
    otherwise)."""

    def __init__(self, python: str, path: str, work: Path, port: int,
                 standin: str = "", env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ledger = work / f"ledger-{port}.jsonl"
        self.ledger.unlink(missing_ok=True)
        self.log_path = work / f"server-{port}.log"
        self.log = open(self.log_path, "w")
        settings = f"step_ms=5,length=40,ledger={self.ledger}" + (f",{standin}" if standin
                                                                   else "")
        # a short TMPDIR: ipc:// socket paths under it (SGLang's, sglang-tok's) are bounded
        self.tmp = tempfile.mkdtemp(prefix="sti-", dir="/tmp" if Path("/tmp").is_dir()
                                    else None)
        env = {**os.environ, "PYTHONPATH": path, "SGLANG_PLUGINS": "sglang_tok_standin",
               "SGLANG_TOK_STANDIN": settings, "TMPDIR": self.tmp, **(env or {})}
        cmd = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir(work)),
               "--device", "cpu", "--port", str(port), "--log-level", "warning",
               "--skip-server-warmup", *args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=work)

    def wait_ready(self, timeout: float = 300.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): "
                                   f"{self.tail()}")
            try:
                # ids, not text: a server with --skip-tokenizer-init takes only ids
                post(self.url + "/generate", {"input_ids": READY_IDS,
                                              "sampling_params": {"max_new_tokens": 2}}, 10)
                return time.monotonic() - t0
            except OSError:
                time.sleep(1.0)
        raise RuntimeError(f"the server was not ready in {timeout:.0f}s: {self.tail()}")

    def tail(self, lines: int = 12) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        useful = [line for line in text if line.strip() and "fix_mistral_regex" not in line]
        return "\n".join(useful[-lines:])

    def stop_alone(self, timeout: float = 30.0) -> tuple[float, list[str]]:
        """SIGTERM to the launcher alone, as a user stops a server: (seconds until its
        whole process tree was gone, what was still running at `timeout`); `stop` then
        ends whatever is left."""
        import psutil

        try:
            tree = [psutil.Process(self.proc.pid),
                    *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0, []
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        while time.monotonic() - t0 < timeout:
            alive = [p for p in tree if _running(p)]
            if not alive:
                break
            time.sleep(0.1)
        left = []
        for p in tree:
            if _running(p):
                try:
                    left.append(f"{p.pid} {' '.join(p.cmdline())[:80]}")
                except psutil.Error:
                    pass
        return time.monotonic() - t0, left

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _running(proc: Any) -> bool:
    import psutil

    try:
        if proc.pid == os.getpid():
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            try:  # our own child: reap it
                os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return False
        return bool(proc.is_running())
    except psutil.Error:
        return False


@contextmanager
def server(python: str, path: str, work: Path, port: int, **kw: Any) -> Iterator[Server]:
    s = Server(python, path, work, port, **kw)
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


def post(url: str, body: dict[str, Any], timeout: float = 60) -> Any:
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def generate(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One /generate: its last chunk (streamed: every chunk's text must extend the one
    before it, SGLang's /generate streams the text so far)."""
    if not body.get("stream"):
        return post(url + "/generate", body)
    req = urllib.request.Request(url + "/generate", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    last: dict[str, Any] = {}
    chunks = 0
    with urllib.request.urlopen(req, timeout=60) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            out = json.loads(line[5:])
            if "text" in last and not out["text"].startswith(last["text"]):
                raise AssertionError(f"a chunk took back text: {last['text']!r} -> "
                                     f"{out['text']!r}")
            last = out
            chunks += 1
    last["chunks"] = chunks
    return last


class Ledger:
    """The stand-in's ledger: per rid, the ids it sent and how the request ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tok = load_tokenizer("deepseek-v4")

    def entries(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                e = json.loads(line)
                out[e["rid"]] = e
        return out

    def text(self, e: dict[str, Any]) -> str:
        """What SGLang's detokenizer makes of the ids: a matched stop id or string cut
        unless no_stop_trim."""
        ids, fin = list(e["ids"]), e["finish"] or {}
        matched = fin.get("matched")
        if fin.get("type") == "stop" and isinstance(matched, int) and ids \
                and ids[-1] == matched and not e["no_stop_trim"]:
            ids = ids[:-1]
        text = self.tok.decode(ids, skip_special_tokens=e["skip_special_tokens"])
        if fin.get("type") == "stop" and isinstance(matched, str):
            at = text.find(matched)
            if at >= 0:
                text = text[:at + len(matched)] if e["no_stop_trim"] else text[:at]
        return text


def check(url: str, ledger: Ledger, rounds: int = 2) -> tuple[int, int, list[str]]:
    """Every ask `rounds` times, a few at once: (checked, exact, what differed)."""
    asks = [a for _ in range(rounds) for a in ASKS]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda a: generate(url, a), asks))
    time.sleep(0.2)  # the ledger line is written after the step that ended it
    seen = ledger.entries()
    checked = exact = 0
    wrong: list[str] = []
    for ask, out in zip(asks, outs):
        e = seen.get(out["meta_info"]["id"])
        if e is None:
            wrong.append(f"{ask['text']!r}: not in the ledger")
            continue
        checked += 1
        want = ledger.text(e)
        if out["text"] == want and out["meta_info"]["completion_tokens"] == len(e["ids"]):
            exact += 1
        else:
            wrong.append(f"{ask['text']!r}: {out['text'][:60]!r} != {want[:60]!r} "
                         f"({out['meta_info']['completion_tokens']} vs {len(e['ids'])} ids)")
    return checked, exact, wrong


def run(release: str, python: str, work: Path, port: int) -> dict[str, Any]:
    """Start, check, stop: one row of the per-release table."""
    row: dict[str, Any] = {"release": release, "started": False, "exact": "",
                           "notes": ""}
    path = release_path(release, python)
    if path is None:
        row["notes"] = "not installed"
        return row
    work.mkdir(parents=True, exist_ok=True)
    s = Server(python, path, work, port)
    try:
        row["startup_s"] = round(s.wait_ready(), 1)
        row["started"] = True
        checked, exact, wrong = check(s.url, Ledger(s.ledger))
        row["exact"] = f"{exact}/{checked}"
        row["notes"] = "; ".join(wrong[:3])
    except Exception as exc:  # a row says what failed
        row["notes"] = str(exc).replace("\n", " | ")[-400:]
    finally:
        s.stop()
    return row


def main() -> None:
    python = os.environ.get("SGLANG_PYTHON", "/tmp/sglv/bin/python")
    base = Path(tempfile.mkdtemp(prefix="standin-releases-"))
    for i, release in enumerate(sys.argv[1:] or RELEASES):
        row = run(release, python, base / release, 32100 + i)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
