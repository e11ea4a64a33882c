"""SGLang's side of `--protocol sglang`, stood in for: what tests, benchmarks and tools use
to drive the service as SGLang's scheduler does and read it as its TokenizerManager does.

`TokenizerSide` binds where the service replies (`--output`, and each tokenizer worker's
endpoint) and keeps every `BatchStrOutput` row by rid, decoded with plain msgpack (ext
values kept as `(code, bytes)`), so that rows compare field by field with the golden
replies SGLang's own detokenizer wrote. `frames` reads the golden files' framing.
`model_dir` is the stand-in model SGLang's launcher is given to run its own detokenizer.
"""

from __future__ import annotations

import json
import shutil
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import zmq

from sglang_tok.protocols.sglang.layout import Layout, builtin
from sglang_tok.tokenizer import resolve_path

Row = dict[str, Any]  # a reply row: every BatchStrOutput field but rids, by name


def frames(path: str | Path) -> list[bytes]:
    """The messages of a golden file: each a little-endian u32 length, then its bytes."""
    data, at, out = Path(path).read_bytes(), 0, []
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        out.append(data[at + 4:at + 4 + n])
        at += 4 + n
    return out


# a plain chat template for the stand-in model (the built-in tokenizer ships none)
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def model_dir(work: str | Path, tokenizer: str = "deepseek-v4") -> Path:
    """A model directory SGLang's ServerArgs and `get_tokenizer` accept without weights:
    the tokenizer's files and a one-layer config (the detokenizer reads only the former)."""
    src = resolve_path(tokenizer).parent
    out = Path(work) / "model"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    conf_path = out / "tokenizer_config.json"
    conf = json.loads(conf_path.read_text()) if conf_path.is_file() else {}
    conf.setdefault("chat_template", CHAT_TEMPLATE)  # /v1/chat/completions needs one
    conf_path.write_text(json.dumps(conf))
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 1,
        "num_key_value_heads": 4, "vocab_size": 129280, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "torch_dtype": "float32"}))
    return out


_decoder = msgspec.msgpack.Decoder(ext_hook=lambda code, data: (code, bytes(data)))


def reply_rows(msg: bytes, layout: Layout | None = None) -> list[tuple[str, Row]]:
    """(rid, row) of every row of one BatchStrOutput of a release (default: the newest)."""
    fields = _decoder.decode(msg)
    if not isinstance(fields, list) or fields[:1] != ["BatchStrOutput"]:
        raise ValueError(f"not a BatchStrOutput: {str(fields)[:80]}")
    cols = dict(zip((layout or builtin()).str_output, fields[1:]))
    rids = cols.pop("rids")
    n = len(rids)
    return [(rid, {k: v[i] if isinstance(v, list) and len(v) == n else v
                   for k, v in cols.items()}) for i, rid in enumerate(rids)]


def rows_by_rid(messages: Iterable[bytes], layout: Layout | None = None
                ) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for msg in messages:
        for rid, row in reply_rows(msg, layout):
            out.setdefault(rid, []).append(row)
    return out


class TokenizerSide:
    """The TokenizerManager's PULL socket (and its workers'), with every row read so far."""

    def __init__(self, endpoint: str, workers: Iterable[str] = (),
                 layout: Layout | None = None) -> None:
        self.layout = layout  # the release whose replies these are (None: the newest)
        self.ctx = zmq.Context()
        self.sockets: dict[str | None, zmq.Socket] = {}
        self.poller = zmq.Poller()
        for where in (None, *workers):
            sock = self.ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(endpoint if where is None else where)
            self.sockets[where] = sock
            self.poller.register(sock, zmq.POLLIN)
        self.rows: dict[str, list[Row]] = {}
        self.where: dict[str, list[str | None]] = {}  # per rid, the socket of each row
        self.messages = 0
        self.raw: list[bytes] = []
        self.keep_raw = False

    def poll(self, timeout: float) -> int:
        """Read what arrives within `timeout` seconds; the rows read."""
        got = 0
        for sock, _ in self.poller.poll(int(timeout * 1000)):
            where = next(k for k, s in self.sockets.items() if s is sock)
            while True:
                try:
                    msg = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.messages += 1
                if self.keep_raw:
                    self.raw.append(msg)
                for rid, row in reply_rows(msg, self.layout):
                    self.rows.setdefault(rid, []).append(row)
                    self.where.setdefault(rid, []).append(where)
                    got += 1
        return got

    def finished(self, rid: str) -> bool:
        rows = self.rows.get(rid)
        return rows is not None and rows[-1]["finished_reasons"] is not None

    def wait(self, rids: Iterable[str], timeout: float = 30.0) -> bool:
        """True once every rid has its last row."""
        want = list(rids)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            want = [r for r in want if not self.finished(r)]
            if not want:
                return True
            self.poll(0.2)
        return False

    def text(self, rid: str) -> str:
        return "".join(row["output_strs"] for row in self.rows.get(rid, []))

    def finish(self, rid: str) -> Any:
        rows = self.rows.get(rid)
        return rows[-1]["finished_reasons"] if rows else None

    def clear(self) -> None:
        self.rows.clear()
        self.where.clear()
        self.raw.clear()

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(linger=0)
        self.ctx.term()
