"""The encode service (issue 9), started for real: `sglang-tok serve --encode-workers M`."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
import zmq
from local_service import LocalService
from tokenizers import Tokenizer

from sglang_tok.config import Config, ConfigError, finalize
from sglang_tok.encoders import cores as plan_mod
from sglang_tok.kit.encode_client import AsyncEncodeClient, EncodeClient, EncodeError
from sglang_tok.process import plan_cores
from sglang_tok.tokenizer import load_tokenizer
from sglang_tok_testkit import zoo

TEXTS = [*zoo.CORPUS, "", " ", "<|im_start|>user\nhi<|im_end|>", "a" * 3000,
         "Ünïcödé — “quotes” ‘and’ …\u00a0nbsp", "🙂" * 50, "\n\n\t\r\n",
         "日本語のテキストと한국어 문장, العربية, ภาษาไทย, हिन्दी"]
LIMITS = ["--encode-max-texts", "64", "--encode-max-text-chars", "200000",
          "--encode-max-total-chars", "1000000", "--encode-queue", "4"]


def _serve(tmp: Path, workers: int, tokenizer: str = "deepseek-v4",
           extra: list[str] | None = None) -> LocalService:
    args = ["--encode-workers", str(workers), "--encode", f"ipc://{tmp}/encode.ipc",
            "--tokenizer", tokenizer, *LIMITS, *(extra or [])]
    return LocalService(tmp, shards=1, args=args).start(timeout=120)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("deepseek-v4")


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    s = _serve(tmp_path_factory.mktemp("enc"), workers=2)
    yield s
    s.stop()


def _endpoint(s: LocalService) -> str:
    return f"ipc://{s.runtime.parent}/encode.ipc"


class Raw:
    """A bare DEALER: sends any bytes, returns each reply decoded as a plain map."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, body: bytes | dict[str, Any]) -> None:
        self.sock.send(body if isinstance(body, bytes) else msgspec.msgpack.encode(body))

    def recv(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.sock.poll(int(timeout * 1000)), "no reply"
        reply = msgspec.msgpack.decode(self.sock.recv())
        assert isinstance(reply, dict)
        return reply

    def call(self, body: bytes | dict[str, Any]) -> dict[str, Any]:
        self.send(body)
        return self.recv()

    def close(self) -> None:
        self.sock.close()


def _encode_pids(s: LocalService) -> dict[str, int]:
    return {p["role"]: p["pid"] for p in s.health()[1]["processes"]
            if p["role"].startswith("encode")}


# ---------------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("special", [True, False])
def test_ids_equal_tokenizer_encode_batched_and_not(svc: LocalService, tok: Tokenizer,
                                                    special: bool) -> None:
    client = EncodeClient(_endpoint(svc))
    try:
        want = [tok.encode(t, add_special_tokens=special).ids for t in TEXTS]
        assert client.encode(TEXTS, add_special_tokens=special) == want
        for text, ids in zip(TEXTS, want, strict=True):
            assert client.encode([text], add_special_tokens=special) == [ids]
        assert client.encode([]) == []
    finally:
        client.close()


def test_offsets_equal_the_tokenizers_and_are_character_offsets(svc: LocalService,
                                                                tok: Tokenizer) -> None:
    client = EncodeClient(_endpoint(svc))
    try:
        ids, offsets = client.encode(TEXTS, offsets=True)
    finally:
        client.close()
    for text, got_ids, got in zip(TEXTS, ids, offsets, strict=True):
        enc = tok.encode(text)
        assert got_ids == enc.ids and [tuple(o) for o in got] == enc.offsets
    # character (not byte) offsets: every id of a non-ASCII text maps onto text[start:end]
    text = "大型语言模型 Привет"
    enc = tok.encode(text)
    assert "".join(text[a:b] for a, b in enc.offsets) == text
    assert max(b for _, b in enc.offsets) == len(text) < len(text.encode())


@pytest.mark.parametrize("family", sorted(zoo.FAMILIES))
def test_every_decoder_family_encodes_exactly(tmp_path: Path, family: str) -> None:
    tokenizer = zoo.FAMILIES[family]()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    s = _serve(tmp_path, workers=1, tokenizer=str(path))
    client = EncodeClient(_endpoint(s))
    try:
        for special in (True, False):
            want = [tokenizer.encode(t, add_special_tokens=special).ids for t in TEXTS]
            assert client.encode(TEXTS, add_special_tokens=special) == want
            assert [client.encode([t], add_special_tokens=special)[0] for t in TEXTS] == want
        ids, offsets = client.encode(TEXTS[:3], offsets=True)
        assert [[tuple(o) for o in x] for x in offsets] == \
            [tokenizer.encode(t).offsets for t in TEXTS[:3]]
        # the control of test_long_prompt_does_not_delay_short_ones: with one worker, short
        # prompts sent after a long one wait for it
        assert _order_after_long(s, _long_prompt(tokenizer)) == ["long", *range(4)]
    finally:
        client.close()
        s.stop()


# ---------------------------------------------------------------------------- requests, errors
def test_ids_are_echoed_unknown_keys_ignored_and_req_sockets_work(svc: LocalService) -> None:
    raw = Raw(_endpoint(svc))
    try:
        for rid in ("r-1", 7, 2.5, None, True):
            reply = raw.call({"id": rid, "texts": ["hi"], "extra": {"x": 1}})
            assert reply["id"] == rid and len(reply["ids"]) == 1 and "offsets" not in reply
        assert raw.call({"texts": ["hi"]})["id"] is None
    finally:
        raw.close()
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(_endpoint(svc))
    try:
        req.send(msgspec.msgpack.encode({"id": "q", "texts": ["a b"]}))
        assert req.poll(60_000)
        assert msgspec.msgpack.decode(req.recv())["id"] == "q"
    finally:
        req.close()


MALFORMED: list[tuple[bytes | dict[str, Any], str]] = [
    (b"", "not msgpack"),
    (b"\xc1", "not msgpack"),
    (b"\x81\xa5texts", "not msgpack"),  # truncated: a map whose value is missing
    (msgspec.msgpack.encode([1, 2]), "Expected `object`"),
    (msgspec.msgpack.encode("texts"), "Expected `object`"),
    ({"id": 1}, "missing required field `texts`"),
    ({"id": 2, "texts": "not a list"}, "Expected `array`"),
    ({"id": 3, "texts": ["ok", 5]}, "Expected `str`"),
    ({"id": 4, "texts": [b"bytes"]}, "Expected `str`"),
    ({"id": 5, "texts": ["x"], "add_special_tokens": "yes"}, "Expected `bool`"),
    ({"id": 6, "texts": ["x"], "offsets": 1}, "Expected `bool`"),
    ({"id": {"not": "scalar"}, "texts": ["x"]}, "$.id"),
]


def test_every_malformed_request_gets_an_error_reply(svc: LocalService) -> None:
    before = _encode_pids(svc)
    m0 = svc.metrics().get('sglang_tok_encode_errors_total{reason="malformed"}', 0.0)
    raw = Raw(_endpoint(svc))
    try:
        for body, words in MALFORMED:
            reply = raw.call(body)
            assert words in reply["error"], (body, reply)
            assert set(reply) == {"id", "error"}
            want_id = body.get("id") if isinstance(body, dict) else None
            assert reply["id"] == (want_id if not isinstance(want_id, dict) else None)
        assert raw.call({"id": "after", "texts": ["still fine"]})["ids"]
    finally:
        raw.close()
    assert _encode_pids(svc) == before  # nobody died
    m = svc.metrics()
    assert m['sglang_tok_encode_errors_total{reason="malformed"}'] - m0 == len(MALFORMED)


def test_limits_answer_with_the_limit_named(svc: LocalService) -> None:
    raw = Raw(_endpoint(svc))
    try:
        cases = [({"id": 1, "texts": ["x"] * 65}, "--encode-max-texts 64"),
                 ({"id": 2, "texts": ["ok", "y" * 200_001]}, "--encode-max-text-chars 200000"),
                 ({"id": 3, "texts": ["z" * 200_000] * 5 + ["!"]},
                  "--encode-max-total-chars 1000000")]
        for body, flag in cases:
            reply = raw.call(body)
            assert flag in reply["error"] and reply["id"] == body["id"]
        # just within every limit: answered
        assert len(raw.call({"texts": ["w" * 200_000] * 5})["ids"]) == 5
    finally:
        raw.close()
    m = svc.metrics()
    for reason in ("limit_texts", "limit_text_chars", "limit_total_chars"):
        assert m[f'sglang_tok_encode_errors_total{{reason="{reason}"}}'] >= 1


def test_health_and_metrics_show_the_encode_service(svc: LocalService) -> None:
    code, health = svc.health()
    assert code == 200
    roles = [p["role"] for p in health["processes"]]
    assert roles[:2] == ["egress", "shard 0"]
    assert roles[2:] == ["http", "encode-broker", "encode-worker 0", "encode-worker 1"]
    assert all(p["alive"] and p["pid"] > 0 for p in health["processes"])
    client = EncodeClient(_endpoint(svc))
    m0 = svc.metrics()
    try:
        ids = client.encode(["one two", "three"])
    finally:
        client.close()
    m = svc.metrics()
    assert m["sglang_tok_encode_requests_total"] - m0["sglang_tok_encode_requests_total"] == 1
    assert m["sglang_tok_encode_texts_total"] - m0["sglang_tok_encode_texts_total"] == 2
    assert m["sglang_tok_encode_tokens_total"] - m0["sglang_tok_encode_tokens_total"] == \
        sum(map(len, ids))
    assert m["sglang_tok_encode_seconds_count"] > m0["sglang_tok_encode_seconds_count"]
    assert m["sglang_tok_encode_queue_depth"] == 0


def test_async_client_keeps_many_requests_in_flight(svc: LocalService, tok: Tokenizer) -> None:
    texts = TEXTS[-5:]  # 6 in flight: 2 held by the workers, 4 in the queue (--encode-queue)

    async def run() -> list[Any]:
        client = AsyncEncodeClient(_endpoint(svc))
        try:
            return await asyncio.gather(*(client.encode([t]) for t in texts),
                                        client.encode(TEXTS[:2], offsets=True))
        finally:
            client.close()

    got = asyncio.run(run())
    assert got[:-1] == [[tok.encode(t).ids] for t in texts]
    assert got[-1][0] == [tok.encode(t).ids for t in TEXTS[:2]]
    client = EncodeClient(_endpoint(svc))
    try:
        with pytest.raises(EncodeError, match="--encode-max-texts 64"):
            client.encode(["x"] * 65)
    finally:
        client.close()


# ------------------------------------------------------------------------ scheduling, faults
def _long_prompt(tok: Tokenizer, tokens: int = 20_000) -> str:
    """At least `tokens` tokens of multilingual text."""
    text = " ".join(zoo.CORPUS)
    per = len(tok.encode(text).ids)
    long = " ".join([text] * (tokens // per + 1))
    assert len(tok.encode(long).ids) >= tokens
    return long


def _order_after_long(s: LocalService, long: str) -> list[Any]:
    """Send a long prompt then 4 short ones (as many as --encode-queue 4 lets wait); the ids
    in the order their replies came."""
    raw = Raw(_endpoint(s))
    try:
        raw.send({"id": "long", "texts": [long]})
        time.sleep(0.01)  # let the broker hand it out before the short ones arrive
        for k in range(4):
            raw.send({"id": k, "texts": [f"short prompt {k}"]})
        replies = [raw.recv() for _ in range(5)]
        assert all("ids" in r for r in replies), replies
        return [r["id"] for r in replies]
    finally:
        raw.close()


def test_long_prompt_does_not_delay_short_ones(svc: LocalService, tok: Tokenizer) -> None:
    """M = 2: the 60,000-token prompt holds one worker; the short ones go to the other (the
    control, M = 1, is in test_every_decoder_family_encodes_exactly). 20,000 tokens held
    it on an idle machine; a loaded one once let those finish first."""
    order = _order_after_long(svc, _long_prompt(tok, 60_000))
    assert order == [*range(4), "long"], order


def test_a_full_queue_answers_with_an_error(svc: LocalService, tok: Tokenizer) -> None:
    """Both workers busy, --encode-queue 4 waiting: the fifth waiting request is refused."""
    long = _long_prompt(tok, 40_000)
    raw = Raw(_endpoint(svc))
    try:
        for k in range(2):
            raw.send({"id": f"long-{k}", "texts": [long]})
        for k in range(5):
            raw.send({"id": k, "texts": ["queued"]})
        replies = {r["id"]: r for r in (raw.recv() for _ in range(7))}
    finally:
        raw.close()
    assert "--encode-queue 4" in replies[4]["error"]
    assert all("ids" in replies[k] for k in ("long-0", "long-1", 0, 1, 2, 3))
    assert svc.metrics()['sglang_tok_encode_errors_total{reason="queue_full"}'] >= 1


def test_killed_worker_requests_get_errors_and_later_ones_succeed(svc: LocalService,
                                                                   tok: Tokenizer) -> None:
    """SIGKILL one of two workers while both hold a request (runs last: it restarts one).

    The victim is stopped (SIGSTOP) before the requests go out, so it still holds its
    request when it is killed however fast the machine encodes (a 1M-character request
    can take under 0.5 s)."""
    big = [t[:200_000] for t in [_long_prompt(tok, 60_000)] * 5]
    pids = _encode_pids(svc)
    victim = pids["encode-worker 0"]
    raw = Raw(_endpoint(svc))
    try:
        os.kill(victim, signal.SIGSTOP)  # idle to the broker, but it cannot answer
        raw.send({"id": "a", "texts": big})
        raw.send({"id": "b", "texts": big})
        time.sleep(0.3)  # the broker hands one request to each idle worker
        os.kill(victim, signal.SIGKILL)
        replies = {r["id"]: r for r in (raw.recv(120) for _ in range(2))}
        died = [r for r in replies.values() if "error" in r]
        assert len(died) == 1 and "worker died" in died[0]["error"], replies
        assert sum("ids" in r for r in replies.values()) == 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = _encode_pids(svc)
            if svc.health()[0] == 200 and now["encode-worker 0"] not in (0, victim):
                break
            time.sleep(0.2)
        else:
            pytest.fail("encode worker 0 did not come back:\n" + svc.logs())
        for k in range(4):  # both workers serve again
            assert raw.call({"id": k, "texts": ["after the kill"]})["ids"]
    finally:
        raw.close()
    assert svc.metrics()['sglang_tok_encode_errors_total{reason="worker_died"}'] == 1
    assert "restarted encode-worker 0" in svc.logs()


# ------------------------------------------------------------------------- configuration
def test_encode_config_defaults_and_refusals(tmp_path: Path) -> None:
    rt = str(tmp_path / "rt")
    assert finalize(Config(runtime_dir=rt)).encode == ""
    assert finalize(Config(runtime_dir=rt, encode_workers=2)).encode == f"ipc://{rt}/encode.ipc"
    for bad in (Config(runtime_dir=rt, encode_workers=-1),
                Config(runtime_dir=rt, encode_workers=1, encode_queue=0),
                Config(runtime_dir=rt, encode_workers=1, encode="tcp://127.0.0.1:5555",
                       curve_keys=str(tmp_path))):
        with pytest.raises(ConfigError):
            finalize(bad)


@pytest.mark.parametrize(("cores", "shards", "workers", "want", "warns"), [
    (range(8), 3, 2, [[4], [5]], False),  # egress 0, shards 1-3, workers on free cores
    (range(5), 3, 2, [[4], [4]], True),  # one free core: they share it
    (range(4), 3, 2, [None, None], True),  # none free
    (range(2), 2, 1, [None], True),  # the shards themselves run unpinned
])
def test_encode_workers_go_on_cores_the_shards_do_not_use(
        monkeypatch: pytest.MonkeyPatch, cores: range, shards: int, workers: int,
        want: list[Any], warns: bool) -> None:
    monkeypatch.setattr(psutil.Process, "cpu_affinity", lambda self, *a: list(cores))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(cores))
    plan, why = plan_mod.plan(shards, workers, True)
    assert plan == want and bool(why) == warns
    shard_cores, egress_core, _ = plan_cores(shards, True)
    used = {c for c in [*shard_cores, egress_core] if c is not None}
    assert all(not used & set(p) for p in plan if p is not None)
    assert plan_mod.plan(shards, workers, False) == ([None] * workers, "")


def test_no_pickle_in_the_encode_service() -> None:
    """As test_security's walk, for sglang_tok/encoders/: nothing that reads a socket
    unpickles."""
    import ast
    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("sglang_tok/encoders/*.py"), root / "sglang_tok" / "kit" / "encode_client.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not any("pickle" in n or "marshal" in n for n in names), path
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("recv_pyobj", "send_pyobj", "recv_serialized"), path


def test_bench_encode_runs_and_prints_ratios(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "encode.py"
    out = tmp_path / "b.json"
    r = subprocess.run([sys.executable, str(script), "--clients", "2", "--duration", "1",
                        "--warmup", "0.2", "--prompts", "8", "--rounds", "1", "--workers", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "req/s x" in r.stdout
    figures = json.loads(out.read_text())
    assert set(figures) == {"baseline", "sglang-tok M=1"}
    assert all(f["requests"] > 0 and f["errors"] == 0 for f in figures.values())


def test_killed_broker_comes_back_and_finds_its_workers(svc: LocalService) -> None:
    """The workers re-announce themselves to a new broker; clients reconnect by themselves.
    (Placed after the worker-kill test: it restarts a process of the shared service.)"""
    victim = _encode_pids(svc)["encode-broker"]
    raw = Raw(_endpoint(svc))
    try:
        assert raw.call({"id": "before", "texts": ["x"]})["ids"]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if svc.health()[0] == 200 and _encode_pids(svc)["encode-broker"] not in (0, victim):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the encode broker did not come back:\n" + svc.logs())
        for k in range(4):  # the same socket: it reconnected to the new broker
            assert raw.call({"id": k, "texts": ["after the broker kill"]})["ids"]
    finally:
        raw.close()
