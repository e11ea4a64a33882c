"""Record and replay: the service, asked to (`--record`, the plugin's SGLANG_TOK_RECORD),
keeps every scheduler message it receives in a trace; the stand-in scheduler replays the
trace's streams to new requests: the same ids in the same rows, ending as they ended."""

from __future__ import annotations

from pathlib import Path

from sglang_cases import GOLDEN, MANIFEST, SglangService, moved_ipcs
from test_standin_rows import EOS, TOKENIZER, fields, ids_of

from sglang_tok.tracefile import read
from sglang_tok_standin.core import Core, wire_beams
from sglang_tok_standin.requests import Ask, Sampling
from sglang_tok_standin.streams import Replayed
from sglang_tok_standin.trace_reader import recordings
from sglang_tok_testkit.sglang_side import frames


def golden_streams(case: str) -> dict[str, tuple[list[list[int]], dict | None]]:
    out: dict[str, tuple[list[list[int]], dict | None]] = {}
    for msg in frames(GOLDEN / f"{case}.in.bin"):
        f = fields(msg)
        for i, rid in enumerate(f["rids"]):
            chunks, _ = out.get(rid, ([], None))
            chunks.append(ids_of(f["output_ids"][i]))
            out[rid] = (chunks, f["finished_reasons"][i])
    return out


def test_recorded_trace_replays_the_same_streams(tmp_path: Path) -> None:
    trace = tmp_path / "gpu.trace"
    case = "random"
    with SglangService(tmp_path, 2, ["--record", str(trace)]) as s:
        ins, _ = s.case(case)
        for m in ins:
            s.send(m)
        assert s.side.wait(MANIFEST["cases"][case]["exact"], timeout=30)
    recorded = read(trace)
    assert recorded.meta["protocol"] == "sglang" and len(recorded.frames) == len(ins)
    assert recorded.times == sorted(recorded.times) and recorded.times[-1] < 60
    assert [bytes(f) for f in recorded.frames] == [moved_ipcs(m, s.where) for m in
                                                   frames(GOLDEN / f"{case}.in.bin")]
    want = golden_streams(case)
    got = recordings(trace)
    assert [(c, f) for c, f in got] == list(want.values())
    # the stand-in hands recording k to the k-th request, row for row
    core = Core(Replayed(got), None, frozenset([EOS]), TOKENIZER.get_vocab_size(),
                wire_beams)
    for k in range(len(got)):
        core.add(Ask(rid=f"new-{k}", input_ids=(5, 6), sampling=Sampling(
            max_new_tokens=1 << 20, ignore_eos=True)))
    rows: dict[str, list[list[int]]] = {}
    finish: dict[str, dict] = {}
    while core.busy:
        cols = core.step()
        if cols is None:
            continue
        for rid, ids, fin in zip(cols["rids"], cols["output_ids"], cols["finished_reasons"]):
            rows.setdefault(rid, []).append(list(ids))
            if fin is not None:
                finish[rid] = fin
    for k, (chunks, fin) in enumerate(got):
        flat = [t for c in rows[f"new-{k}"] for t in c]
        assert flat == [t for c in chunks for t in c], k
        assert finish[f"new-{k}"] == (fin or {"type": "length", "length": len(flat)})


def test_a_restarted_recorder_goes_on_with_the_same_trace(tmp_path: Path) -> None:
    from sglang_tok.tracefile import Recorder

    path = tmp_path / "t.trace"
    first = Recorder(path, {"protocol": "sglang", "t0": 100.0})
    first.write(101.0, b"one")
    first.close()
    again = Recorder(path, {"protocol": "sglang", "t0": 500.0})  # a new egress
    again.write(102.5, b"two")
    again.close()
    t = read(path)
    assert t.frames == [b"one", b"two"] and t.times == [1.0, 2.5]
    assert t.meta["t0"] == 100.0  # the first header stands
