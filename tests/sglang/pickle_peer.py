"""SGLang's side of a pickle-IPC release (0.5.12-0.5.14), for tests without SGLang: run with
PYTHONPATH holding a package `sglang` whose `io_struct` has that release's message classes
(`fake_release`), as dataclasses with its field names. SGLang 0.5.14's scheduler sends
`pickle.dumps(BatchTokenIDOutput(...))`; its TokenizerManager `pickle.loads` the replies.

    python pickle_peer.py encode IN_MSGPACK_FRAMES OUT_PICKLE_FRAMES   (0.5.23 -> this release)
    python pickle_peer.py decode REPLY_FRAMES                          (prints JSON rows)
    python pickle_peer.py rows REPLY_FRAMES           (every field of every row, by name)
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

import msgspec

LEN = struct.Struct("<I")


def frames(path: Path) -> list[bytes]:
    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        (n,) = LEN.unpack_from(data, at)
        out.append(data[at + 4:at + 4 + n])
        at += 4 + n
    return out


def ext(code: int, data: memoryview) -> Any:
    if code != 1:
        return None
    (size,) = struct.unpack_from(">I", data)
    typecode = msgspec.msgpack.decode(data[4:4 + size])
    out = array(typecode)
    out.frombytes(bytes(data[4 + size:]))
    return out


def encode(src: Path, dst: Path, names_023: list[str]) -> None:
    from sglang.srt.managers import io_struct

    fields = [f.name for f in io_struct.dataclasses.fields(io_struct.BatchTokenIDOutput)]
    out = bytearray()
    for msg in frames(src):
        values = msgspec.msgpack.decode(msg, ext_hook=ext)
        by_name = dict(zip(names_023, values[1:]))
        # the pickles of SGLang 0.5.23's own objects do not load here; scheduler-side
        # columns this release has that 0.5.23 does not are empty, as its scheduler sends
        by_name["time_stats"] = by_name["customized_info"] = None
        kwargs = {f: by_name.get(f, []) for f in fields}
        blob = pickle.dumps(io_struct.BatchTokenIDOutput(**kwargs), pickle.HIGHEST_PROTOCOL)
        out += LEN.pack(len(blob)) + blob
    dst.write_bytes(bytes(out))


def decode(src: Path) -> None:
    rows = []
    for blob in frames(src):
        obj = pickle.loads(blob)
        assert type(obj).__name__ == "BatchStrOutput", type(obj)
        for i, rid in enumerate(obj.rids):
            rows.append({"rid": rid, "text": obj.output_strs[i],
                         "finish": obj.finished_reasons[i],
                         "output_ids": list(obj.output_ids[i]),
                         "prompt_tokens": obj.prompt_tokens[i],
                         "completion_tokens": obj.completion_tokens[i],
                         "ipc": obj.http_worker_ipcs[i] if obj.http_worker_ipcs else None,
                         "logprobs": obj.output_token_logprobs_val[i]
                         if obj.output_token_logprobs_val else None})
    print(json.dumps(rows))


def plain(value: Any) -> Any:
    """A field's value as JSON carries it (arrays as lists, bytes as hex, objects as their
    fields), to compare two releases' messages field by field."""
    if isinstance(value, array):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "__dict__"):
        return {"__class__": type(value).__name__, **plain(vars(value))}
    return value


def rows(src: Path) -> None:
    """Every row of every reply: each per-row field's entry, the others as they are."""
    out = []
    for blob in frames(src):
        fields = plain(vars(pickle.loads(blob)))
        n = len(fields["rids"])
        for i, rid in enumerate(fields["rids"]):
            out.append({"rid": rid, **{k: v[i] if isinstance(v, list) and len(v) == n else v
                                       for k, v in fields.items() if k != "rids"}})
    print(json.dumps(out))


def fake_release(root: Path, layout: dict[str, Any]) -> Path:
    """A package `sglang` whose io_struct has the layout's message classes as dataclasses
    (every field None by default), for the service and this peer to import."""
    pkg = root / "sglang"
    (pkg / "srt" / "managers").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"__version__ = {layout['release']!r}\n")
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "managers" / "__init__.py").write_text("")

    def cls(name: str, fields: list[str]) -> str:
        body = "".join(f"    {f}: Any = None\n" for f in fields) or "    pass\n"
        return f"@dataclasses.dataclass\nclass {name}:\n{body}\n\n"

    src = "import dataclasses\nfrom typing import Any\n\n\n" + \
        cls("BatchTokenIDOutput", layout["token_ids"]) + \
        cls("BatchStrOutput", layout["str_output"]) + \
        cls("BatchEmbeddingOutput", layout["embedding"]) + \
        cls("ConfigureLoggingReq", layout["configure_logging"]) + \
        cls("FreezeGCReq", ["rid", "http_worker_ipc", "gc_threshold"]) + \
        cls("GetLoadsReqOutput", [])  # 0.5.12-0.5.13's `load`: restored by its state
    (pkg / "srt" / "managers" / "io_struct.py").write_text(src)
    return root


if __name__ == "__main__":
    if sys.argv[1] == "encode":
        encode(Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4]))
    elif sys.argv[1] == "rows":
        rows(Path(sys.argv[2]))
    else:
        decode(Path(sys.argv[2]))
