"""What the SGLang tests share: the golden messages and a service speaking SGLang's protocol
(the `sglang_service` fixture is in conftest.py), and the python that imports SGLang where
one exists (`sglang_python`).

The golden files (`tests/golden/sglang/`, copied from the steering repository's
`shared/golden/sglang/`) are SGLang 0.5.23's own scheduler messages and its own
DetokenizerManager's replies. `http_workers` names tokenizer-worker endpoints under /tmp;
`golden_case` moves them into the test's directory (re-encoding changes no other byte:
`test_wire` checks that the encoder writes every golden message back byte for byte).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import msgspec
from local_service import LocalService

from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import Layout
from sglang_tok_testkit.sglang_side import TokenizerSide, frames, rows_by_rid

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "sglang"
MANIFEST: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text())
CASES = list(MANIFEST["cases"])
_raw_fields = msgspec.msgpack.Decoder(list[msgspec.Raw])


def moved_ipcs(msg: bytes, where: dict[str, str]) -> bytes:
    """The message with each http_worker_ipcs entry replaced by `where[entry]`."""
    fields = _raw_fields.decode(msg)
    if len(fields) < 3:
        return msg
    ipcs = msgspec.msgpack.decode(fields[2])
    if not ipcs:
        return msg
    fields[2] = msgspec.Raw(msgspec.msgpack.encode([where.get(i, i) for i in ipcs]))
    return msgspec.msgpack.encode(fields)


def worker_ipcs() -> list[str]:
    found: dict[str, None] = {}
    for msg in frames(GOLDEN / "http_workers.in.bin"):
        fields = _raw_fields.decode(msg)
        for ipc in msgspec.msgpack.decode(fields[2]) or []:
            if ipc:
                found[ipc] = None
    return list(found)


class SglangService:
    """The service with `--protocol sglang` and the TokenizerManager's side bound."""

    def __init__(self, tmp: Path, shards: int, args: list[str] | None = None,
                 layout: Layout | None = None) -> None:
        self.where = {ipc: f"ipc://{tmp}/worker-{k}.ipc" for k, ipc in enumerate(worker_ipcs())}
        self.svc = LocalService(tmp, shards=shards, args=["--protocol", "sglang", *(args or [])],
                           frontend=False)
        self.side = TokenizerSide(self.svc.output, self.where.values(), layout)

    def __enter__(self) -> SglangService:
        self.svc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.svc.stop()
        self.side.close()

    def send(self, msg: bytes) -> None:
        self.svc.send(msg)

    def settled_metrics(self, timeout: float = 10.0) -> dict[str, float]:
        """/metrics once two reads 0.3 s apart agree: every process has published what it
        did so far (each publishes within a poll interval of going idle)."""
        last = self.svc.metrics()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = self.svc.metrics()
            if now == last:
                return now
            last = now
        return last

    def case(self, name: str) -> tuple[list[bytes], dict[str, list[dict[str, Any]]]]:
        """A golden case's messages (worker endpoints moved here) and SGLang's rows."""
        ins = [moved_ipcs(m, self.where) for m in frames(GOLDEN / f"{name}.in.bin")]
        ref = rows_by_rid(moved_ipcs(m, self.where) for m in frames(GOLDEN / f"{name}.out.bin"))
        return ins, ref


def token_ids_message(rows: list[dict[str, Any]], **fields: Any) -> bytes:
    """A BatchTokenIDOutput of plain rows: rid, ids, and optionally finish, completion
    (cumulative output ids), prompt (ids before read_offset), skip, no_stop_trim, ipc;
    `fields` sets other fields of the message as they are."""
    n = len(rows)
    return wire.encode_token_ids({**fields,
        "rids": [r["rid"] for r in rows],
        "http_worker_ipcs": [r.get("ipc") for r in rows],
        "finished_reasons": [r.get("finish") for r in rows],
        "decoded_texts": [""] * n,
        "decode_ids": [r.get("prompt", []) + r["ids"] for r in rows],
        "read_offsets": [len(r.get("prompt", [])) for r in rows],
        "output_ids": [r["ids"] for r in rows],
        "skip_special_tokens": [r.get("skip", True) for r in rows],
        "spaces_between_special_tokens": [True] * n,
        "no_stop_trim": [r.get("no_stop_trim", False) for r in rows],
        "prompt_tokens": [r.get("prompt_tokens", 5) for r in rows],
        "reasoning_tokens": [0] * n,
        "completion_tokens": [r.get("completion", len(r["ids"])) for r in rows],
        "cached_tokens": [0] * n,
    })


def sglang_python() -> str | None:
    """The python named by SGLANG_PYTHON, when it imports SGLang and sglang_tok (opt-in:
    each run imports SGLang, tens of seconds, so the suite does not look for one)."""
    candidate = os.environ.get("SGLANG_PYTHON")
    if not candidate or not Path(candidate).exists():
        return None
    probe = subprocess.run([candidate, "-c", "import sglang.srt.entrypoints.engine, "
                            "sglang_tok.integrations.sglang.plugin"],
                           capture_output=True, timeout=120)
    return candidate if probe.returncode == 0 else None
