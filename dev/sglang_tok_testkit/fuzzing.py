"""Frame mutators and the ring fuzzing round, shared by the test and scripts/load/fuzz.py."""

from __future__ import annotations

import functools
import itertools
import math
import struct
from collections import Counter
from typing import Any

import msgspec
from hypothesis import strategies as st

from sglang_tok.kit.local_service import LocalService
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
from sglang_tok.protocols.model import batch, control, tags
from sglang_tok.protocols.model.errors import FrameError
from sglang_tok.tokenizer import TokenizerInfo, load

TAGS = [tags.TAG_RESULT, tags.TAG_BATCH, tags.TAG_ERROR, tags.TAG_OPEN,
        tags.TAG_ABORT, tags.TAG_PING]


def fuzz_batch(rids: list[str], vocab: int) -> st.SearchStrategy[bytes]:
    """A valid BATCH of junk rows for these rids: odd ids, NaN logprobs, all families."""
    row = st.fixed_dictionaries({
        "rid": st.sampled_from(rids),
        "ids": st.lists(st.one_of(st.integers(0, vocab - 1), st.integers(-2**63, 2**63 - 1),
                                  st.sampled_from([vocab, 2**31, 2**32 + 5, -1])), max_size=6),
        "finish": st.sampled_from([None, None, {"type": "length", "length": 1},
                                   {"type": "stop", "matched": "x"},
                                   {"type": "abort", "message": "m"}]),
    }, optional={
        "output_logprobs": st.lists(st.tuples(st.sampled_from([math.nan, -math.inf, -0.5]),
                                              st.integers(-2**31, 2**31 - 1)).map(list),
                                    max_size=3),
        "output_top": st.lists(st.one_of(st.none(), st.lists(st.tuples(
            st.sampled_from([math.nan, -1.0]), st.integers(-2**31, 2**31 - 1)).map(list),
            min_size=1, max_size=3)), max_size=3),
    })
    return st.lists(row, min_size=1, max_size=5).map(batch.encode_batch)


def mutate(frame: bytes, data: st.DataObject) -> bytes:
    """One structural mutation of a valid frame."""
    kind = data.draw(st.sampled_from(
        ["truncate", "flip", "extend", "retag", "swap_cols", "lens", "negative", "huge",
         "rid_type", "finish_type", "deep", "enormous", "header_len"]), label="mutation")
    b = bytearray(frame)
    if kind == "truncate":
        return bytes(b[:data.draw(st.integers(0, max(0, len(b) - 1)))])
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(b) - 1))
            b[i] ^= data.draw(st.integers(1, 255))
        return bytes(b)
    if kind == "extend":
        return bytes(b) + data.draw(st.binary(min_size=1, max_size=16))
    if kind == "retag":
        b[0] = data.draw(st.integers(0, 255))
        return bytes(b)
    if frame[0] != tags.TAG_BATCH:
        return bytes(b[:-1]) if len(b) > 1 else b"\x00"
    hlen = struct.unpack_from("<I", frame, 1)[0]
    cols: list[Any] = msgspec.msgpack.decode(frame[5:5 + hlen])
    body = frame[5 + hlen:]
    if kind == "swap_cols":
        i, j = data.draw(st.integers(0, len(cols) - 1)), data.draw(st.integers(0, len(cols) - 1))
        cols[i], cols[j] = cols[j], cols[i]
    elif kind == "lens":
        c = data.draw(st.integers(0, len(cols) - 1))
        cols[c] = list(cols[c]) + [1] if data.draw(st.booleans()) else list(cols[c])[:-1]
    elif kind == "negative":
        c = data.draw(st.integers(2, min(5, len(cols) - 1)))
        if cols[c]:
            cols[c][0] = -data.draw(st.integers(1, 2**40))
    elif kind == "huge":
        cols[3] = [2**62] * len(cols[3])
    elif kind == "rid_type":
        if cols[0]:
            cols[0][0] = data.draw(st.sampled_from([7, None, b"bytes", ["x"], 1.5, ""]))
    elif kind == "finish_type":  # any msgpack value where a finish reason's `type` goes
        if cols[1]:
            cols[1][0] = {"type": data.draw(st.sampled_from(
                [[[[]]], {"a": 1}, 7, None, b"stop", 1.5, "weird", ["stop"]]))}
    elif kind == "deep":
        head = b"\x91" * 50000 + b"\xc0"
        return b"\x02" + struct.pack("<I", len(head)) + head + body
    elif kind == "enormous":
        head = b"\xdd\xff\xff\xff\xf0" + b"\xc0" * 8
        return b"\x02" + struct.pack("<I", len(head)) + head + body
    elif kind == "header_len":
        return b"\x02" + struct.pack("<I", data.draw(st.integers(0, 2**32 - 1))) + frame[5:]
    head = msgspec.msgpack.encode(cols)
    return b"\x02" + struct.pack("<I", len(head)) + head + body


def bad_control(data: st.DataObject, rid: str) -> bytes:
    tag = data.draw(st.sampled_from(TAGS[:1] + TAGS[2:]), label="tag")
    body = data.draw(st.sampled_from([
        {"rid": rid, "stop": 5}, {"rid": 7}, {"rids": [rid, 3]}, {"nonce": "x"}, [rid],
        [rid, 5], {"rid": rid, "prompt_ids": ["a"]}, {}, [], "str", {"rid": ""},
    ]), label="body")
    return bytes((tag,)) + msgspec.msgpack.encode(body)


def classify(frame: bytes) -> tuple[str | None, list[str], list[str]]:
    """(drop reason or None, rids a drop fails, rids a valid frame names): our codec's view."""
    try:
        if frame and frame[0] == tags.TAG_BATCH:
            return None, [], batch.decode_batch(frame, 512, 4096).rids
        msg = control.decode_control(frame)
    except FrameError as err:
        return err.reason, err.rids, []
    if isinstance(msg, control.Abort):
        return None, [], msg.rids
    if isinstance(msg, control.Ping):
        return None, [], []
    return None, [], [msg.rid]


_round = itertools.count()


@functools.cache
def _info() -> TokenizerInfo:
    return load("deepseek-v4")


def dropped(svc: LocalService) -> Counter[str]:
    """Frames dropped by reason."""
    return Counter({k.split('"')[1]: int(v) for k, v in svc.metrics().items()
                    if k.startswith("sglang_tok_frames_dropped_total{")})


def tracebacks(svc: LocalService) -> int:
    """Tracebacks in the service log: an input that reaches one found a bug."""
    return svc.log_path.read_text(errors="replace").count("Traceback (most recent call last)")


def fuzz_round(svc: LocalService, data: st.DataObject) -> None:
    """One hypothesis example: valid requests with fuzzed frames among them, then every
    promise checked (exact, counted by reason, named rids ended, no internal error)."""
    info = _info()
    front = svc.front
    assert front is not None, "the fuzz round reads the service's output"
    n = next(_round)  # fresh rids for every run of an example, replays included
    seed = data.draw(st.integers(0, 2**16), label="plan seed")
    reqs = make_requests(info, PlanSpec(requests=6, concurrency=6, min_tokens=2, max_tokens=12,
                                        ids_per_row=(1, 3), stop_share=0.3, seed=seed),
                         prefix=f"ok{n:07d}")  # fixed width: frame sizes depend on draws only
    fz = [f"fz{n:07d}-{i}" for i in range(4)]
    svc.barrier(timeout=60)  # a round that failed half-way must not leak into this one
    before = dropped(svc)
    front.violations.clear()
    want: Counter[str] = Counter()
    tainted: set[str] = set()
    named_by_drops: set[str] = set()
    for step in schedule(reqs, 6, seed):
        frames = [*step.opens, *([step.batch] if step.batch else []), *step.ends]
        for f in frames:
            svc.send(f)
        for _ in range(data.draw(st.integers(0, 3), label="fuzz frames")):
            source = data.draw(st.sampled_from(["junk", "mutant", "control", "bytes"]))
            if source == "junk":
                bad = data.draw(fuzz_batch(fz, info.vocab_size))
            elif source == "mutant":
                bad = mutate(data.draw(st.sampled_from(frames or [step.batch or b"\x02"])), data)
            elif source == "control":
                bad = bad_control(data, data.draw(st.sampled_from(fz + [r.rid for r in reqs])))
            else:
                bad = data.draw(st.binary(max_size=64))
            reason, failed, names = classify(bad)
            if reason is not None:
                want[reason] += 1
                named_by_drops.update(failed)
            tainted.update(failed)
            tainted.update(names)
            svc.send(bad)
        front.poll(0)
    svc.barrier(timeout=60)
    assert svc.health()[0] == 200, svc.logs()
    got = dropped(svc) - before
    assert got == want, (got, want)
    assert got["internal"] == 0 and not tracebacks(svc), svc.logs()
    for r in reqs:
        out = front.requests.get(r.rid)
        if r.rid in tainted:
            assert out is None or out.finished or r.rid not in named_by_drops, r.rid
        else:
            assert not verify(r, out, info), verify(r, out, info)
    for rid in named_by_drops:
        out = front.requests.get(rid)
        assert out is not None and out.finished, rid
    # a fuzzed OPEN may legally reopen (reuse) a rid it names: judge only the others
    unexpected = [v for v in front.violations if v.split(":")[0] not in tainted
           and not v.startswith("fz")]
    assert not unexpected, unexpected[:5]
