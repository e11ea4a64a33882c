"""Every SGLang release with plugin hooks (0.5.12-0.5.23) served as that release's own
detokenizer serves it, without SGLang: each release's golden messages (made by its own
scheduler-side classes, `tests/golden/sglang/releases/`) through the real service started
with that release's layout, and every reply row compared field by field with what the
release's real DetokenizerManager answered; texts add up to the full decode.

msgpack releases (0.5.15 on; 0.5.15-0.5.18 send arrays as `[typecode, bytes]` pairs) are
read by the test as they are; pickle releases (0.5.12-0.5.14) through a package standing
in for their `io_struct` (`pickle_peer.fake_release`: their classes by field name), in the
service and in the peer that reads both sides' pickles."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
from local_service import LocalService
from pickle_peer import LEN, fake_release

from sglang_tok.protocols.sglang.layout import known, known_releases
from sglang_tok_testkit.sglang_side import frames, rows_by_rid

RELEASES_DIR = Path(__file__).resolve().parent.parent / "golden" / "sglang" / "releases"
PEER = Path(__file__).with_name("pickle_peer.py")
RELEASES = known_releases()
# the workers' sockets of http_workers are rewritten per test run, which a pickle does not
# allow without unpickling it here: that case runs on the msgpack releases
CASES = ["plain", "prompt_context", "multi_id_rows", "stops", "special", "logprobs", "abort",
         "http_workers", "random"]
TWO_SHARDS = ("0.5.13", "0.5.17")  # a pickle release, a [typecode, bytes] one


def manifest(release: str) -> dict[str, Any]:
    return json.loads((RELEASES_DIR / release / "manifest.json").read_text())


class Release:
    """One release's service and the TokenizerManager's sockets (the workers' included)."""

    def __init__(self, release: str, shards: int, tmp: Path) -> None:
        self.release = release
        self.layout = known(release)
        self.pickle = self.layout.ipc == "pickle"
        self.fake = fake_release(tmp / "fake", msgspec.to_builtins(self.layout)) \
            if self.pickle else None
        # one shard inside the egress's process, as the plugin runs SGLang's default
        inline = ["--inline-shard"] if shards == 1 else []
        self.svc = LocalService(tmp, shards=shards, frontend=False,
                           args=["--protocol", "sglang", "--sglang-layout", release, *inline],
                           env={"PYTHONPATH": str(self.fake)} if self.fake else None)
        self.ctx = zmq.Context()
        self.workers = {ipc: f"ipc://{tmp}/worker-{k}.ipc"
                        for k, ipc in enumerate(self._worker_ipcs())}
        self.socks = []
        for where in (self.svc.output, *self.workers.values()):
            sock = self.ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(where)
            self.socks.append(sock)

    def _worker_ipcs(self) -> list[str]:
        if self.pickle:
            return []
        at = self.layout.token_ids.index("http_worker_ipcs") + 1
        seen: dict[str, None] = {}
        for msg in frames(RELEASES_DIR / self.release / "http_workers.in.bin"):
            for ipc in msgspec.msgpack.decode(msgspec.msgpack.decode(
                    msg, type=list[msgspec.Raw])[at]) or []:
                if ipc:
                    seen[ipc] = None
        return list(seen)

    def moved(self, msg: bytes) -> bytes:
        """A scheduler message with its workers' endpoints the test's own."""
        return self._renamed(msg, self.layout.token_ids)

    def moved_back(self, msg: bytes) -> bytes:
        """The release's reply with its workers named as ours are (the test's sockets)."""
        return self._renamed(msg, self.layout.str_output)

    def _renamed(self, msg: bytes, names: tuple[str, ...]) -> bytes:
        if self.pickle or not self.workers:
            return msg
        fields = msgspec.msgpack.decode(msg, type=list[msgspec.Raw])
        at = names.index("http_worker_ipcs") + 1
        ipcs = msgspec.msgpack.decode(fields[at])
        if ipcs:
            fields[at] = msgspec.Raw(msgspec.msgpack.encode(
                [self.workers.get(i, i) if i else i for i in ipcs]))
        return msgspec.msgpack.encode(fields)

    def run(self, case: str, tmp: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(our rows, the release's rows), each row every field by name."""
        folder = RELEASES_DIR / self.release
        spec = manifest(self.release)["cases"][case]
        for msg in frames(folder / f"{case}.in.bin"):
            self.svc.send(self.moved(msg))
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            polled = False
            for sock in self.socks:
                while sock.poll(0):
                    got.append(sock.recv())
                    polled = True
            if not polled:
                ours = self.rows(got, tmp / "ours.bin")
                ended = {r["rid"] for r in ours if r["finished_reasons"] is not None}
                if ended >= set(spec["exact"]):
                    break
                time.sleep(0.2)
        return self.rows(got, tmp / "ours.bin"), \
            self.rows([self.moved_back(m) for m in frames(folder / f"{case}.out.bin")],
                      tmp / "theirs.bin")


    def rows(self, msgs: list[bytes], path: Path) -> list[dict[str, Any]]:
        if not self.pickle:
            return [{"rid": rid, **row} for rid, rs in rows_by_rid(msgs, self.layout).items()
                    for row in rs]
        path.write_bytes(b"".join(LEN.pack(len(m)) + m for m in msgs))
        r = subprocess.run([sys.executable, str(PEER), "rows", str(path)],
                           capture_output=True, text=True, timeout=120,
                           env={"PYTHONPATH": str(self.fake), "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def close(self) -> None:
        self.svc.stop()
        for sock in self.socks:
            sock.close(linger=0)
        self.ctx.term()


@pytest.fixture(scope="module",
                params=[(r, 1) for r in RELEASES] + [(r, 2) for r in TWO_SHARDS],
                ids=lambda p: f"{p[0]}-{p[1]}shard")
def release(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    name, shards = request.param
    rel = Release(name, shards, tmp_path_factory.mktemp(f"rel-{name}"))
    rel.svc.start()
    try:
        yield rel
    finally:
        rel.close()


@pytest.mark.parametrize("case", CASES)
def test_each_release_is_answered_as_its_own_detokenizer_answers(
        release: Release, case: str, tmp_path: Path) -> None:
    if case == "http_workers" and release.pickle:
        pytest.skip("a pickle's worker endpoints are not rewritten here")
    spec = manifest(release.release)["cases"][case]
    ours, theirs = release.run(case, tmp_path)
    by_rid: dict[str, list[dict[str, Any]]] = {}
    for row in ours:
        by_rid.setdefault(row["rid"], []).append(row)
    want: dict[str, list[dict[str, Any]]] = {}
    for row in theirs:
        want.setdefault(row["rid"], []).append(row)
    assert set(by_rid) == set(want), release.svc.logs()[-2000:]
    for rid, exact in spec["exact"].items():
        mine, ref = by_rid[rid], want[rid]
        assert "".join(r["output_strs"] for r in mine) == exact, (rid, release.svc.logs()[-800:])
        assert len(mine) == len(ref), rid  # one reply row per scheduler row
        for got, row in zip(mine, ref):
            got, row = dict(got), dict(row)
            del got["output_strs"], row["output_strs"]  # per-row texts may differ
            assert got == row, (rid, {k for k in got if got[k] != row.get(k)})
