"""Releases 0.5.12-0.5.14 speak pickle IPC only: the scheduler sends pickled dataclasses and
the TokenizerManager unpickles its replies. The service reads them (by field name, through
`pickled.from_pickle`) only from SGLang's own process tree and answers with the release's
own `BatchStrOutput`, pickled. Without SGLang: a package standing in for SGLang 0.5.14's
`io_struct` (its classes as dataclasses with its field names, `pickle_peer.fake_release`),
the golden cases' messages rebuilt in it, every text exact and every row as SGLang's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from local_service import LocalService
from pickle_peer import LEN, fake_release, frames
from sglang_cases import GOLDEN, MANIFEST

from sglang_tok.config import Config, ConfigError, finalize
from sglang_tok.protocols.registry import check
from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import builtin, known
from sglang_tok_testkit.sglang_side import rows_by_rid

PEER = Path(__file__).with_name("pickle_peer.py")
RELEASE = "0.5.14"
CASES = ["plain", "multi_id_rows", "stops", "logprobs", "abort"]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_release(tmp_path_factory.mktemp("fake-sglang"),
                        msgspec.to_builtins(known(RELEASE)))


def _peer(fake: Path, *args: str) -> str:
    r = subprocess.run([sys.executable, str(PEER), *args], capture_output=True, text=True,
                       timeout=120, env={"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module", params=[1, 2], ids=["1shard", "2shards"])
def service(request: pytest.FixtureRequest, fake: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    tmp = tmp_path_factory.mktemp("pickle-ipc")
    with LocalService(tmp, shards=request.param, frontend=False,
                 args=["--protocol", "sglang", "--sglang-layout", RELEASE],
                 env={"PYTHONPATH": str(fake)}) as svc:
        yield svc


@pytest.mark.parametrize("case", CASES)
def test_a_pickle_release_is_read_and_answered_in_pickles(service: LocalService, fake: Path,
                                                          tmp_path: Path, case: str) -> None:
    spec = MANIFEST["cases"][case]
    pickled, out = tmp_path / "in.bin", tmp_path / "out.bin"
    _peer(fake, "encode", str(GOLDEN / f"{case}.in.bin"), str(pickled),
          json.dumps(list(builtin().token_ids)))
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(service.output)
    try:
        for blob in frames(pickled):
            assert blob[:1] == b"\x80"  # a pickle, as send_pyobj writes it
            service.send(blob)
        got = bytearray()
        deadline = time.monotonic() + 30
        ends: set[str] = set()
        while ends != set(spec["exact"]) and time.monotonic() < deadline:
            while pull.poll(500):  # read until quiet, then see what ended
                blob = pull.recv()
                got += LEN.pack(len(blob)) + blob
            out.write_bytes(bytes(got))
            ends = {r["rid"] for r in json.loads(_peer(fake, "decode", str(out)))
                    if r["finish"] is not None}
    finally:
        pull.close(linger=0)
        ctx.term()
    rows = json.loads(_peer(fake, "decode", str(out)))
    ref = rows_by_rid(frames(GOLDEN / f"{case}.out.bin"))
    for rid, exact in spec["exact"].items():
        mine = [r for r in rows if r["rid"] == rid]
        assert "".join(r["text"] for r in mine) == exact, rid
        assert len(mine) == len(ref[rid]), rid
        for r, want in zip(mine, ref[rid]):
            assert r["finish"] == want["finished_reasons"], rid
            assert r["output_ids"] == _ids(want["output_ids"]), rid
            assert r["prompt_tokens"] == want["prompt_tokens"], rid
            assert r["completion_tokens"] == want["completion_tokens"], rid
            assert r["logprobs"] == want["output_token_logprobs_val"], rid


def _ids(value: tuple[int, bytes]) -> list[int]:
    """An `array` ext as SGLang's replies carry it (code, payload), as ids."""
    return memoryview(wire.int64_bytes(msgspec.msgpack.Ext(*value))).cast("q").tolist()


def test_pickles_are_read_only_from_sglangs_own_process_tree(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pickled"):
        checked(Config(protocol="sglang", sglang_layout=RELEASE,
                        input="tcp://10.1.2.3:5555", runtime_dir=str(tmp_path / "a")))
    with pytest.raises(ConfigError, match="loopback"):
        checked(Config(protocol="sglang", sglang_layout=RELEASE, sglang_own_tree=True,
                        input="tcp://10.1.2.3:5555", runtime_dir=str(tmp_path / "b")))
    ok = checked(Config(protocol="sglang", sglang_layout=RELEASE, sglang_own_tree=True,
                         input="tcp://127.0.0.1:5555", runtime_dir=str(tmp_path / "c")))
    assert ok.sglang_own_tree


def checked(cfg: Config) -> Config:
    """A Config as `sglang-tok serve` takes it: finalized, then the protocol's own check."""
    cfg = finalize(cfg)
    check(cfg)
    return cfg
