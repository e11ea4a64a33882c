"""The COLUMNS output frame (protocol section 5.2): same deltas as DELTAS, as columns."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import msgspec
import pytest
from decoding import default_table
from hypothesis import given, settings
from hypothesis import strategies as st
from local_service import LocalService

from sglang_tok.finish import ABORT, Length, Stop
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
from sglang_tok.protocols.model import columns, errors, output, packed
from sglang_tok.protocols.model import deltas as native_deltas
from sglang_tok.protocols.model import tags as native_tags
from sglang_tok.protocols.model.columns import Columns
from sglang_tok.protocols.model.deltas import Delta, Deltas, Usage
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_testkit.local_route import LocalRoute

INFO: TokenizerInfo = load("deepseek-v4")

pairs = st.lists(st.tuples(st.floats(-50, 0, width=32), st.integers(0, 1 << 20)), max_size=3)
deltas_st = st.builds(
    Delta,
    rid=st.text(min_size=1, max_size=8),
    text=st.text(max_size=8),
    ids=st.lists(st.integers(-5, 1 << 40), max_size=4),
    logprobs=st.none() | pairs.map(lambda p: [list(x) for x in p]),
    top_logprobs=st.none() | st.lists(st.none() | pairs.map(lambda p: [[i, v] for v, i in p]),
                                      max_size=2),
    token_texts=st.none() | st.lists(st.text(max_size=3), max_size=3),
    attributions=st.none() | st.lists(st.tuples(st.integers(0, 9), st.integers(0, 1),
                                                st.integers(0, 99)), max_size=3),
    finish=st.none() | st.sampled_from([Length(3), Stop("x"), ABORT]),
    usage=st.none() | st.builds(Usage, *[st.integers(0, 99)] * 5),
    error=st.none() | st.text(max_size=5),
    result=st.none() | st.binary(max_size=5),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(deltas_st, max_size=12), st.integers(-1, 3), st.integers(0, 1 << 33))
def test_columns_round_trip_to_the_same_deltas(deltas: list[Delta], shard: int, seq: int) -> None:
    frame = output.encode_output("columnar", shard, seq, deltas)
    assert frame[0] == native_tags.TAG_COLUMNS
    msg = output.decode_output(frame)
    assert isinstance(msg, Columns)
    assert (msg.shard, msg.seq, len(msg)) == (shard, seq, len(deltas))
    assert msg.deltas == deltas
    assert list(msg.rows()) == [(d.rid, d.text, d.ids) for d in deltas]
    assert msg.last_rows() == [r for r, d in enumerate(deltas) if d.finish is not None]
    # DELTAS stays the default, byte for byte what it was
    assert output.encode_output("deltas", shard, seq, deltas) == \
        native_deltas.encode_deltas(Deltas(shard, seq, deltas))


def test_layout_is_an_array_that_stops_after_the_last_non_empty_column() -> None:
    plain = [Delta("a", "x", [5]), Delta("b", "", [6, 7])]
    raw = msgspec.msgpack.decode(output.encode_output("columnar", 1, 9, plain)[1:])
    assert raw == [1, 9, ["a", "b"], ["x", ""], [1, 2], [5, 6, 7]]
    ended = plain + [Delta("c", "!", [], finish=ABORT, error="boom")]
    raw = msgspec.msgpack.decode(output.encode_output("columnar", 0, 0, ended)[1:])
    assert raw[6:] == [[[2, {"type": "abort"}]], [], [[2, "boom"]]]
    assert columns.SPARSE_COLUMNS[:4] == ("finish", "usage", "error", "result")
    ones = output.decode_output(output.encode_output("columnar", 0, 0, plain[:1] * 3))
    assert isinstance(ones, Columns)
    assert list(ones.rows()) == [("a", "x", [5])] * 3  # the one-id-per-row path
    with pytest.raises(errors.FrameError):
        output.decode_output(b"\x42\x90")


def by_rid(deltas: list[Delta]) -> dict[str, list[Delta]]:
    out: dict[str, list[Delta]] = defaultdict(list)
    for d in deltas:
        out[d.rid].append(d)
    return dict(out)


@pytest.mark.parametrize("ids_per_row,shared", [((1, 1), False), ((1, 4), True)])
def test_shard_columns_hold_exactly_the_deltas_of_the_deltas_path(
        ids_per_row: tuple[int, int], shared: bool) -> None:
    """Two tables fed the same frames: per rid, the same deltas in the same order."""
    spec = PlanSpec(requests=150, concurrency=40, ids_per_row=ids_per_row, min_tokens=2,
                    max_tokens=30, logprob_share=0.3, stop_share=0.2, options_share=0.3,
                    special_share=0.2, abort_share=0.05, error_share=0.05, prompt_share=0.2,
                    seed=3)
    nshards = 2 if shared else 1
    formats = ("deltas", "columnar", "packed")
    routes = [LocalRoute(nshards) for _ in formats]
    tables = [[default_table(INFO, k) for k in range(nshards)] for _ in routes]
    got: list[list[Delta]] = [[] for _ in formats]
    for step in schedule(make_requests(INFO, spec), spec.concurrency, spec.seed):
        frames = [*step.opens, *([step.batch] if step.batch else []), *step.ends]
        for f in frames:
            for k, (route, fmt) in enumerate(zip(routes, formats)):
                sinks = [output.output_sink(fmt) for _ in range(nshards)]
                route.feed(f, tables[k], sinks)
                for sink in sinks:
                    msg = output.decode_output(output.encode_output(fmt, 1, 0, sink))
                    assert isinstance(msg, (Deltas, Columns, packed.Packed)[k])
                    got[k] += msg.deltas
    assert len(got[0]) > 300
    assert by_rid(got[1]) == by_rid(got[0])
    assert by_rid(got[2]) == by_rid(got[0])


@pytest.mark.parametrize("fmt,tag", [("columnar", native_tags.TAG_COLUMNS),
                                     ("packed", native_tags.TAG_PACKED)])
def test_service_with_columnar_output_is_exact(tmp_path: Path, fmt: str, tag: int) -> None:
    svc = LocalService(tmp_path, shards=2, args=["--output-format", fmt]).start()
    tags: set[int] = set()
    take = svc.front.take

    def record(raw: bytes) -> None:  # which frame kinds arrived, then the usual checks
        tags.add(raw[0])
        take(raw)

    svc.front.take = record  # type: ignore[method-assign]
    try:
        spec = PlanSpec(requests=300, concurrency=64, ids_per_row=(1, 3), min_tokens=4,
                        max_tokens=30, logprob_share=0.2, stop_share=0.1, options_share=0.2,
                        abort_share=0.03, error_share=0.02, seed=11)
        reqs = make_requests(INFO, spec)
        for step in schedule(reqs, spec.concurrency, spec.seed):
            for f in [*step.opens, *([step.batch] if step.batch else []), *step.ends]:
                svc.send(f)
            svc.front.poll(0)
        svc.barrier()
        problems = [p for r in reqs for p in verify(r, svc.front.requests.get(r.rid), INFO)]
        assert not problems, problems[:10]
        assert not svc.front.violations, svc.front.violations[:10]
        assert tags == {tag, native_tags.TAG_PONG}
    finally:
        svc.stop()
