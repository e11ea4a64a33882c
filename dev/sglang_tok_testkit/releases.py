"""SGLang releases on this box, and whole servers of them with the stand-in scheduler.

Each release other than the side environment's own (SGLang 0.5.23,
`../shared/tools/sglang-venv.sh`) is its wheel installed without dependencies into a folder
of its own (`pip install --no-deps --target /tmp/sgl-site-0.5.16`), with the release's own
pins of the pure-Python packages whose newer versions it cannot import with
(transformers, tokenizers, huggingface-hub, kernels, read from the wheel's METADATA, and
what the pinned transformers itself needs of them); torch and the rest stay the side
environment's. `PYTHONPATH=this checkout:FOLDER` then runs that release's own code
(launcher, HTTP server, TokenizerManager, detokenizer, message classes) and this
checkout's plugin and stand-in. `lay_out` makes such a folder (idempotent: a folder marked
ready is reused); `site_path` is the PYTHONPATH that runs a release.

`Server` is `python -m sglang.launch_server` of a release with the stand-in in the
scheduler's place (it writes a ledger of what it sent) and either SGLang's own
detokenizer or the plugin; `refusal` is the one line a plugin that cannot serve the
release stopped the server with. `generate` and `chat` are the HTTP clients (streamed
replies read whole).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from sglang_tok.protocols.sglang.layout import known_releases, release_key
from sglang_tok_standin.kernel import FOLDER as KERNEL_STANDIN
from sglang_tok_testkit.processes import PACKAGE_FOLDERS, stop_group
from sglang_tok_testkit.sglang_side import model_dir

# the folder this package is in (a checkout's root): first on every server's PYTHONPATH
DEFAULT_PYTHON = "/tmp/sglv/bin/python"
DEFAULT_SITES = "/tmp/sgl-site-{release}"
DEFAULT_WHEELS = "/tmp/sglvers"
READY = ".ready"
# the packages a release's wheel pins that its folder gets (the rest: the side environment's)
PINNED = ("transformers", "tokenizers", "huggingface-hub", "kernels")
PLUGINS_STOCK = "sglang_tok_standin"
READY_IDS = [30602, 14, 2058]  # a short prompt as ids (" Jess, world" in DeepSeek-V4's)
PLUGINS_PLUGIN = "sglang_tok,sglang_tok_standin"


def releases() -> list[str]:
    """Every release with plugin hooks the project has a layout of (0.5.12-0.5.23)."""
    return known_releases()


def parse_releases(text: str) -> list[str]:
    """`all`, or a comma-separated list (`0.5.12-0.5.15` spans known releases)."""
    known = releases()
    if text.strip() in ("", "all"):
        return known
    out: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, dash, hi = part.partition("-")
        if dash:
            out += [r for r in known
                    if release_key(lo) <= release_key(r) <= release_key(hi)]
        else:
            out.append(part)
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------- pins
def requirement_name(req: str) -> str:
    """`transformers==4.57.1` -> `transformers`; `Huggingface_Hub>=0.3` -> `huggingface-hub`."""
    name = re.split(r"[<>=!~\[ (;]", req.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _requires(metadata: str) -> Iterator[tuple[str, str]]:
    """(requirement, marker) of each Requires-Dist line, spaces out of the requirement."""
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            req, _, marker = line.split(":", 1)[1].strip().partition(";")
            yield req.replace(" ", ""), marker.strip()


def release_pins(metadata: str) -> list[str]:
    """What an SGLang wheel's METADATA pins of `PINNED`, unconditionally (an extra's or a
    platform's requirement is not the release's own)."""
    return [req for req, marker in _requires(metadata)
            if not marker and requirement_name(req) in PINNED]


def transformers_needs(metadata: str) -> list[str]:
    """What a transformers wheel's METADATA needs of tokenizers and huggingface-hub (its
    own requirements), and of kernels only as its `kernels` extra pins it (the hub-kernels
    integration imports it)."""
    out: dict[str, str] = {}
    for req, marker in _requires(metadata):
        name = requirement_name(req)
        if (name in ("tokenizers", "huggingface-hub") and not marker) or \
                (name == "kernels" and "kernels" in marker):
            out.setdefault(name, req)
    return list(out.values())


def wheel_metadata(wheel: Path) -> str:
    """A wheel's `*.dist-info/METADATA`."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return z.read(name).decode()


# --------------------------------------------------------------------------- folders
class LayOutError(RuntimeError):
    """A release that could not be laid out (one line: which step, and how to retry it)."""


def side_release(python: str) -> str:
    """The SGLang release `python` imports of its own (without any folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([python, "-c", "import sglang; print(sglang.__version__)"], env=env,
                       capture_output=True, text=True, timeout=120)
    return r.stdout.strip() if r.returncode == 0 else ""


def site_folders(release: str, sites: str) -> list[Path]:
    """The folders a template names for a release (os.pathsep-separated, `{release}` in
    each filled in)."""
    return [Path(p.replace("{release}", release)) for p in sites.split(os.pathsep) if p]


def lay_out(release: str, python: str, sites: str = DEFAULT_SITES,
            wheels: str | Path = DEFAULT_WHEELS) -> Path | None:
    """The folder that runs `release` beside `python`'s side environment, made if need be
    (None: `python`'s own release, no folder). The wheel is taken from `wheels` or
    downloaded there (`pip download --no-deps`); the folder is marked ready once the
    release's detokenizer and HTTP server import from it, and a ready folder is reused."""
    if release == side_release(python):
        return None
    folders = site_folders(release, sites)
    if not folders:
        raise LayOutError(f"{release}: --sites names no folder")
    ready = next((f for f in folders if (f / READY).is_file()), None)
    if ready is not None:
        return ready
    folder, pip = folders[0], [python, "-m", "pip", "-q", "--disable-pip-version-check"]
    wheels = Path(wheels)
    wheels.mkdir(parents=True, exist_ok=True)

    def step(what: str, *args: str) -> None:
        r = subprocess.run([*pip, *args], capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            raise LayOutError(f"{release}: {what} failed ({tail})")

    wheel = _wheel(release, wheels)
    if wheel is None:
        step("download", "download", "--no-deps", f"sglang=={release}", "-d", str(wheels))
        wheel = _wheel(release, wheels)
    if wheel is None:
        raise LayOutError(f"{release}: no wheel in {wheels}")
    shutil.rmtree(folder, ignore_errors=True)
    step("install", "install", "--no-deps", "--target", str(folder), str(wheel))
    pins = release_pins(wheel_metadata(wheel))
    if pins:
        step(f"pins {' '.join(pins)}", "install", "--no-deps", "--target", str(folder), *pins)
        tf = sorted(folder.glob("transformers-*.dist-info/METADATA"))
        more = transformers_needs(tf[0].read_text()) if tf else []
        if more:
            step(f"pins {' '.join(more)}", "install", "--no-deps", "--upgrade", "--target",
                 str(folder), *more)
    path = os.pathsep.join([str(folder), KERNEL_STANDIN])
    probe = subprocess.run(
        [python, "-W", "ignore", "-c", "import sglang.srt.managers.detokenizer_manager, "
         "sglang.srt.entrypoints.http_server"], capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONPATH": path})
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["?"])[-1]
        raise LayOutError(f"{release}: does not import from {folder} ({tail})")
    (folder / READY).touch()
    return folder


def _wheel(release: str, wheels: Path) -> Path | None:
    found = sorted(wheels.glob(f"sglang-{release}-*.whl"))
    return found[0] if found else None


def site_path(release: str, python: str, sites: str = DEFAULT_SITES) -> str | None:
    """The PYTHONPATH that runs `release` with `python` (this checkout first, then the
    release's folder and the stand-in for `sgl_kernel` some releases import at load), or
    None where `release` is not installed: no folder, or one that imports another."""
    folders = [str(f) for f in site_folders(release, sites) if f.is_dir()]
    path = os.pathsep.join([*PACKAGE_FOLDERS, *folders,
                            *([KERNEL_STANDIN] if folders else [])])
    env = {**os.environ, "PYTHONPATH": path}
    probe = subprocess.run([python, "-c", "import sglang; print(sglang.__version__)"],
                           env=env, capture_output=True, text=True, timeout=120)
    if probe.returncode != 0 or probe.stdout.strip() != release:
        return None
    return path


def beam_search(python: str, path: str) -> bool:
    """Whether the release `path` runs has beam search: its layout's `beam_output` (read
    from its own classes) is not empty."""
    r = subprocess.run([python, "-W", "ignore", "-m", "sglang_tok.protocols.sglang.layout"],
                       env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"its layout was not read: {r.stderr.strip()[-300:]}")
    return bool(json.loads(r.stdout).get("beam_output"))


# --------------------------------------------------------------------------- servers
# ports a server is given: low enough that the ports SGLang derives from --port stay
# valid (0.5.15 checks its gRPC port, --port + 10000, against 65535 even unused)
PORTS = range(20000, 45000)


def free_port() -> int:
    """A free port in `PORTS` (the system's own choice may be too high)."""
    for port in random.sample(PORTS, 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def _running(proc: psutil.Process) -> bool:
    """A process of the tree still running (our own zombie child reaped, not counted)."""
    try:
        if proc.pid == os.getpid():
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            try:
                os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return False
        return bool(proc.is_running())
    except psutil.Error:
        return False


class ServerExited(RuntimeError):
    """The server stopped before it served (`refusal`: the plugin's one line, if so)."""

    def __init__(self, message: str, refusal: str | None) -> None:
        super().__init__(message)
        self.refusal = refusal


class Server:
    """`python -m sglang.launch_server` of a release (PYTHONPATH `path`), the stand-in in
    the scheduler's place writing its ledger, and SGLang's own detokenizer or, with
    `plugin`, sglang-tok's (`env` may say otherwise: SGLANG_PLUGINS). `standin`: more of
    the stand-in's settings (`trace=PATH`, ...)."""

    def __init__(self, python: str, path: str, work: Path, port: int = 0, standin: str = "",
                 env: Mapping[str, str] | None = None, plugin: bool = False,
                 args: tuple[str, ...] = (), step_ms: float = 5, length: int = 40) -> None:
        self.plugin = plugin
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        work.mkdir(parents=True, exist_ok=True)
        self.ledger = work / f"ledger-{self.port}.jsonl"
        self.ledger.unlink(missing_ok=True)
        self.log_path = work / f"server-{self.port}.log"
        self.log = open(self.log_path, "w")
        settings = f"step_ms={step_ms},length={length},ledger={self.ledger}" + \
            (f",{standin}" if standin else "")
        # a short TMPDIR: ipc:// socket paths under it (SGLang's, sglang-tok's) are bounded
        self.tmp = tempfile.mkdtemp(prefix="sti-", dir="/tmp" if Path("/tmp").is_dir()
                                    else None)
        full = {k: v for k, v in os.environ.items() if k != "SGLANG_TOK_FALLBACK"}
        full.update({"PYTHONPATH": path,
                     "SGLANG_PLUGINS": PLUGINS_PLUGIN if plugin else PLUGINS_STOCK,
                     "SGLANG_TOK_STANDIN": settings, "TMPDIR": self.tmp, **(env or {})})
        cmd = [python, "-m", "sglang.launch_server", "--model-path", str(model_dir(work)),
               "--device", "cpu", "--port", str(self.port), "--log-level", "warning",
               "--skip-server-warmup", *args]
        self.proc = subprocess.Popen(cmd, env=full, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=work)

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Seconds until the server answered one /generate. The HTTP server is waited for
        with a request that reaches no scheduler, then one /generate is sent and waited for
        (never sent again: the stand-in gives each request the stream of its arrival
        order, and two servers fed the same requests in the same order get the same)."""
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                why = self.refusal()
                raise ServerExited(why or f"the server exited ({self.proc.returncode}): "
                                   f"{self.tail()}", why)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the server was not up in {timeout:.0f}s: {self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/get_model_info", timeout=10):
                    break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                time.sleep(1.0)
        try:
            # ids, not text: a server with --skip-tokenizer-init takes only ids
            post(self.url + "/generate", {"input_ids": READY_IDS,
                                          "sampling_params": {"max_new_tokens": 2}},
                 max(30.0, timeout - (time.monotonic() - t0)))
        except OSError as exc:
            if self.proc.poll() is not None:
                why = self.refusal()
                raise ServerExited(why or f"the server exited ({self.proc.returncode}): "
                                   f"{self.tail()}", why) from None
            raise RuntimeError(f"the server did not answer ({exc}): {self.tail()}") from None
        return time.monotonic() - t0

    def tail(self, lines: int = 12) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        useful = [line for line in text if line.strip() and "fix_mistral_regex" not in line]
        return "\n".join(useful[-lines:])

    def refusal(self) -> str | None:
        """The one line the plugin stopped the server with (`sglang_tok: ...`), if it did."""
        self.log.flush()
        lines = [line.strip() for line in self.log_path.read_text(errors="replace")
                 .splitlines() if line.strip().startswith("sglang_tok:")]
        said = [line for line in lines if "does not serve" in line or "FALLBACK" in line]
        return said[-1] if said else None

    def detokenizer(self) -> str:
        """Who serves as the detokenizer, by the server's process titles: `sglang-tok` (its
        egress), `sglang` (SGLang's DetokenizerManager) or `?`."""
        try:
            titles = [p.name() + " " + " ".join(p.cmdline()[:1]) for p in
                      psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            return "?"
        if any("sglang-tok" in t for t in titles):
            return "sglang-tok"
        return "sglang" if any("sglang::detokenizer" in t for t in titles) else "?"

    def stop_alone(self, timeout: float = 30.0) -> tuple[float, list[str]]:
        """SIGTERM to the launcher alone, as a user stops a server: (seconds until its
        whole process tree was gone, what was still running at `timeout`); `stop` then
        ends whatever is left."""
        try:
            tree = [psutil.Process(self.proc.pid),
                    *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0, []
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        while time.monotonic() - t0 < timeout:
            if not any(map(_running, tree)):
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
        stop_group(self.proc)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@contextmanager
def server(python: str, path: str, work: Path, port: int = 0, **kw: Any) -> Iterator[Server]:
    s = Server(python, path, work, port, **kw)
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


# --------------------------------------------------------------------------- clients
def post(url: str, body: Mapping[str, Any], timeout: float = 60) -> Any:
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def events(url: str, body: Mapping[str, Any], timeout: float = 60) -> Iterator[Any]:
    """A streamed reply's `data:` events, decoded, up to `[DONE]`."""
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            yield json.loads(line[5:])


def generate(url: str, body: Mapping[str, Any], timeout: float = 60) -> Any:
    """One /generate: its reply, or for a streamed one its last chunk with `chunks` (their
    count) added; every streamed chunk's text must extend the one before it (SGLang's
    /generate streams the text so far)."""
    if not body.get("stream"):
        return post(url + "/generate", body, timeout)
    last: dict[str, Any] = {}
    chunks = 0
    for out in events(url + "/generate", body, timeout):
        if "text" in last and not out["text"].startswith(last["text"]):
            raise AssertionError(f"a chunk took back text: {last['text']!r} -> "
                                 f"{out['text']!r}")
        last = out
        chunks += 1
    last["chunks"] = chunks
    return last


def chat(url: str, body: Mapping[str, Any], timeout: float = 60) -> dict[str, Any]:
    """One /v1/chat/completions, streamed unless `stream` is False, its chunks folded per
    choice: `content` (the deltas joined), `logprobs` (their entries), `finish_reason`,
    `matched_stop`; `id` (the request's rid), `keys` (every key its chunks, choices and
    deltas had), `usage`. Unstreamed, the one reply in the same shape (its message as
    the delta)."""
    if body.get("stream") is False:
        whole = post(url + "/v1/chat/completions", body, timeout)
        return _fold([{**whole, "choices": [{**c, "delta": c.get("message") or {}}
                                            for c in whole.get("choices") or ()]}])
    return _fold(events(url + "/v1/chat/completions", {**body, "stream": True}, timeout))


def _fold(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    choices: dict[int, dict[str, Any]] = {}
    keys: set[str] = set()
    out: dict[str, Any] = {"id": None, "usage": None, "chunks": 0}
    for ev in chunks:
        out["chunks"] += 1
        out["id"] = out["id"] or ev.get("id")
        keys.update(ev)
        if ev.get("usage"):
            out["usage"] = ev["usage"]
        for ch in ev.get("choices") or ():
            keys.update(f"choices.{k}" for k in ch)
            c = choices.setdefault(int(ch.get("index", 0)), {
                "content": "", "logprobs": [], "finish_reason": None, "matched_stop": None})
            delta = ch.get("delta") or {}
            keys.update(f"delta.{k}" for k in delta)
            c["content"] += delta.get("content") or ""
            c["logprobs"] += (ch.get("logprobs") or {}).get("content") or []
            for k in ("finish_reason", "matched_stop"):
                if ch.get(k) is not None:
                    c[k] = ch[k]
    out["choices"] = [choices[i] for i in sorted(choices)]
    out["keys"] = sorted(keys)
    return out
