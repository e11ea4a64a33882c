"""The egress's cut of a scheduler message into shard parts, as byte ranges, checked against
what each part must carry: every row's own value of every passed column (property tests
over columns of every msgpack shape, rows in any order over shards and tokenizer workers),
and SGLang's pickled lists cut by their items without unpickling (pickle_rows.py).

The pickles here are of this test's own classes, built the way SGLang's scheduler builds
its time stats (a `__getstate__` that returns {} with metrics off, a dict of timestamps
with them on)."""

from __future__ import annotations

import pickle
import random
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_cases import token_ids_message

from sglang_tok.protocols.sglang import pickle_rows, spans, wire
from sglang_tok.protocols.sglang.layout import builtin
from sglang_tok.protocols.sglang.part import (
    AS_IS,
    ITEMS,
    NIL,
    NUMBERS,
    SAME,
    SPANS,
    Fields,
    Part,
    encode_part,
    part_decoder,
)
from sglang_tok.protocols.sglang.pickled import cut_rows
from sglang_tok.protocols.sglang.positions import Positions
from sglang_tok.protocols.sglang.reader import SglangReader
from sglang_tok.protocols.sglang.workers import WorkerMap

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


class Stats:
    """A stand-in for SGLang's SchedulerReqTimeStats: pickles to {} without metrics."""

    def __init__(self, metrics: bool, t: float, n: int | None = None) -> None:
        self.metrics, self.t, self.n = metrics, t, n

    def __getstate__(self) -> dict[str, Any]:
        if not self.metrics:
            return {}
        return {"has_timing_data": True, "wait_queue_entry_time": self.t,
                "forward_entry_time": self.t + 1, "storage_prefetch_wait_s": self.n,
                "diff_realtime_monotonic": 1.5}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def key(self) -> Any:
        return sorted(self.__dict__.items())


def _key(value: Any) -> Any:
    return [v.key() if isinstance(v, Stats) else v for v in value]


# ------------------------------------------------------------------ pickled lists
@pytest.mark.parametrize("n", [2, 3, 17, 256, 999, 1000, 1001, 2300])
@pytest.mark.parametrize("metrics", [False, True])
def test_a_pickled_list_is_cut_by_its_items(n: int, metrics: bool) -> None:
    """Any rows, in any order, repeated or not: the part unpickles to those rows."""
    whole = [Stats(metrics, 1000.0 + i / 7) for i in range(n)]
    data = pickle.dumps(whole)
    items = pickle_rows.items_of(data, n)
    if metrics and len(data) > 65536:  # several pickle frames: not cut here
        assert items is None
        return
    assert items is not None
    want = _key(pickle.loads(data))
    rng = random.Random(n)
    for _ in range(20):
        rows = rng.sample(range(n), rng.randint(1, min(n, 40)))
        if rng.random() < 0.3:
            rows += rows[:2]
        assert _key(pickle.loads(items.part(rows))) == [want[r] for r in rows]


def test_a_pickled_list_is_cut_again_by_its_known_shape() -> None:
    """The second message of a shape is cut without reading its opcodes again, and one
    of another shape after it is read afresh."""
    for metrics in (False, True, False, True):
        for n in (5, 300):
            whole = [Stats(metrics, 5.0 + i) for i in range(n)]
            items = pickle_rows.items_of(pickle.dumps(whole), n)
            assert items is not None
            assert _key(pickle.loads(items.part([n - 1, 0, 2]))) == _key(
                pickle.loads(pickle.dumps([whole[n - 1], whole[0], whole[2]])))


@pytest.mark.parametrize("whole", [
    [Stats(True, 1.0, None), Stats(True, 2.0, 7), Stats(True, 3.0, None)],  # sizes differ
    [{"a": "x"}, {"a": "yy"}, {"a": "z"}],  # a string that differs: not a number
    [(1, 2), (1, 2, 3), (1, 2)],
    [Stats(True, 1.0)] * 40000,  # several pickle frames
])
def test_a_pickled_list_of_another_shape_is_not_cut_by_items(whole: list[Any]) -> None:
    """(the caller then cuts it by unpickling, in SGLang's own process tree only)"""
    assert pickle_rows.items_of(pickle.dumps(whole), len(whole)) is None


def test_items_that_share_an_object_keep_it() -> None:
    """[a, a, a]: every later item is a reference to item 0's object (cut by items: each
    part holds that object again)."""
    obj = {"k": 1.5}
    whole = [obj] * 5
    items = pickle_rows.items_of(pickle.dumps(whole), 5)
    assert items is not None
    assert pickle.loads(items.part([3, 1])) == [obj, obj]


@SETTINGS
@given(st.lists(st.tuples(st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                          st.booleans()), min_size=2, max_size=60),
       st.data())
def test_any_pickled_list_is_cut_exactly_or_not_at_all(rows: list[Any], data: Any) -> None:
    """Whatever the list, a cut never gives other rows than asked for."""
    whole = [{"i": i, "f": f, "b": b} for i, f, b in rows]
    items = pickle_rows.items_of(pickle.dumps(whole), len(whole))
    if items is None:
        return
    pick = data.draw(st.lists(st.integers(0, len(whole) - 1), min_size=1, max_size=10))
    assert pickle.loads(items.part(pick)) == [whole[r] for r in pick]


# ------------------------------------------------------------------ columns
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=False), st.text(max_size=40),
                    st.binary(max_size=300))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)


def _column(kind: str, n: int, draw: Any) -> list[Any]:
    if kind == "same":
        value = draw(values)
        return [value] * n
    if kind == "ints":
        return draw(st.lists(st.integers(0, 2**33), min_size=n, max_size=n))
    if kind == "uniform":
        width = draw(st.integers(0, 40))
        return [draw(st.text(alphabet="abcdef0123456789", min_size=width, max_size=width))
                for _ in range(n)]
    if kind == "sparse":
        return [draw(values) if draw(st.booleans()) and draw(st.booleans()) else None
                for _ in range(n)]
    return draw(st.lists(values, min_size=n, max_size=n))


@SETTINGS
@given(st.data())
def test_a_column_located_lies_where_its_rows_are(data: Any) -> None:
    """`locate` says each row's bytes: the same as msgspec's raw rows of the column."""
    n = data.draw(st.integers(1, 70))
    kind = data.draw(st.sampled_from(["same", "ints", "uniform", "sparse", "any"]))
    col = _column(kind, n, data.draw)
    raw = msgspec.msgpack.encode(col)
    want = [bytes(r) for r in msgspec.msgpack.decode(raw, type=list[msgspec.Raw])]
    numbers = col if kind == "ints" and data.draw(st.booleans()) else None
    hint = (spans.int_sizes(col), True) if kind == "ints" and data.draw(st.booleans()) \
        else None
    got = spans.locate(raw, n, (lambda: hint) if hint else None, numbers)
    if got.kind == SAME:
        assert want == [got.value] * n
    elif got.kind == NUMBERS:
        assert list(got.numbers) == col  # type: ignore[arg-type]
    else:
        assert got.kind == SPANS
        if got.width:
            assert all(len(w) == got.width for w in want)
            assert b"".join(want) == got.buf
        else:
            assert [got.buf[s:s + z] for s, z in zip(got.starts.tolist(),  # type: ignore[union-attr]
                                                     got.sizes.tolist())] == want  # type: ignore[union-attr]


def test_a_column_that_is_not_an_entry_per_row_goes_as_it_is_or_as_nil() -> None:
    assert spans.locate(msgspec.msgpack.encode(None), 3).value == NIL
    assert spans.locate(msgspec.msgpack.encode([]), 3).value == b"\x90"
    assert spans.locate(msgspec.msgpack.encode([1, 2]), 3).value == NIL
    assert spans.locate(msgspec.msgpack.encode(["PickleWrapper", b"x"]), 2).value == NIL


def test_a_wrong_size_hint_is_never_trusted() -> None:
    col = ["ab", "cdef", "g"]
    raw = msgspec.msgpack.encode(col)
    lying = (np.array([4, 3, 2], np.int64), False)  # right total, wrong rows
    got = spans.locate(raw, 3, lambda: lying)
    assert [got.buf[s:s + z] for s, z in zip(got.starts.tolist(),  # type: ignore[union-attr]
                                             got.sizes.tolist())] == [  # type: ignore[union-attr]
        msgspec.msgpack.encode(c) for c in col]


# ------------------------------------------------------------------ whole messages
@SETTINGS
@given(st.data())
def test_every_part_carries_its_own_rows_of_every_column(data: Any) -> None:
    """A message of any columns, rows over shards and tokenizer workers in any order: each
    shard's part, read back per group of rows, is those rows of every passed column (the
    pickled list cut by its items, the map of lists by unpickling)."""
    n = data.draw(st.integers(1, 60))
    nshards = data.draw(st.integers(1, 5))
    workers = data.draw(st.integers(1, 4))
    metrics = data.draw(st.booleans())
    rows = [{"rid": f"{'r' * data.draw(st.integers(0, 3))}{k:032x}",
             "ids": [14] * data.draw(st.integers(1, 4)),
             "finish": {"type": "length", "length": 3} if data.draw(st.booleans()) else None,
             "completion": data.draw(st.integers(1, 4000)),
             "prompt_tokens": data.draw(st.integers(1, 70000)),
             "ipc": f"ipc:///tmp/w{k % workers}" if workers > 1 else None} for k in range(n)]
    for r in rows:
        r["completion"] = max(r["completion"], len(r["ids"]) + 1)  # not a first row
    stats = [Stats(metrics, 10.0 + k) for k in range(n)]
    extra = {
        "retraction_counts": [data.draw(st.integers(0, 1))] * n,
        "cached_tokens_details": _column(data.draw(st.sampled_from(["same", "sparse", "any"])),
                                         n, data.draw),
        "output_token_logprobs_val": [[-0.5] * data.draw(st.integers(0, 3)) for _ in range(n)],
        "time_stats": msgspec.Raw(msgspec.msgpack.encode(
            ["PickleWrapper", pickle.dumps(stats)])),
        "customized_info": msgspec.Raw(msgspec.msgpack.encode(
            ["PickleWrapper", pickle.dumps({"score": [k / 3 for k in range(n)]})])),
    }
    msg = token_ids_message(rows, **extra)
    positions = Positions(builtin())
    fields = wire.fields_decoder.decode(msg)
    where = {r["rid"]: k for k, r in enumerate(rows)}  # every rid routed: no first rows
    got = SglangReader(positions, 512, 4096, frozenset(), WorkerMap(), True).step(fields, where)
    carry = got.carry
    assert carry is not None
    shard = np.array([data.draw(st.integers(0, nshards - 1)) for _ in range(n)])
    keys = carry.keys  # type: ignore[attr-defined]
    order = np.argsort(shard if keys is None else shard * 8 + keys, kind="stable")
    first = np.zeros(nshards + 2, np.int64)
    np.cumsum(np.bincount(shard, minlength=nshards + 1), out=first[1:])
    present = np.flatnonzero(np.bincount(shard, minlength=nshards)).tolist()
    parts = carry.parts(order, first, present, None if keys is None else keys[order],
                        data.draw(st.booleans()))
    whole = msgspec.msgpack.decode(msg)
    by_name = dict(zip(positions.layout.token_ids, whole[1:]))
    for s, part in parts.items():
        if not isinstance(part, Part):
            part = part_decoder.decode(part)
        mine = order[first[s]:first[s + 1]].tolist()
        fields_of = Fields(part, cut_rows)
        for (a, b), ipc in zip(part.bounds(), part.ipcs or [None] * 9):
            group = mine[a:b]
            if workers > 1:
                assert {rows[i]["ipc"] for i in group} == {ipc}
            for c, name in enumerate(positions.carried):
                value = msgspec.msgpack.decode(fields_of.field(c, a, b, ipc))
                source = by_name.get(name)
                if name in ("time_stats", "customized_info"):
                    if len(group) == n:
                        continue  # a whole message's pickle passes as it came
                    value = pickle.loads(value[1])
                    if name == "time_stats":
                        assert _key(value) == _key(pickle.loads(pickle.dumps(
                            [stats[i] for i in group]))), name
                    else:
                        assert value == {"score": [i / 3 for i in group]}
                elif isinstance(source, list) and len(source) == n:
                    assert value == [source[i] for i in group], name
                else:
                    assert value == source, name
        assert encode_part(part_decoder.decode(encode_part(part))) == encode_part(part)


def test_the_kinds_a_decode_step_takes() -> None:
    """In a plain decode step the columns that repeat are SAME or AS_IS (nothing cut), the
    token counts travel as numbers, equal-sized rows as records, time stats by items."""
    n = 40
    rows = [{"rid": f"{k:032x}", "ids": [14 + k], "completion": 5 + k % 3,
             "prompt_tokens": 100 + 100 * k} for k in range(n)]
    stats = [Stats(False, 1.0) for _ in range(n)]
    msg = token_ids_message(rows, time_stats=msgspec.Raw(msgspec.msgpack.encode(
        ["PickleWrapper", pickle.dumps(stats)])), retraction_counts=[0] * n)
    positions = Positions(builtin())
    got = SglangReader(positions, 512, 4096, frozenset(), WorkerMap()).step(
        wire.fields_decoder.decode(msg), {r["rid"]: 0 for r in rows})
    carry = got.carry
    order = np.arange(n)
    first = np.array([0, 20, 40, 40])
    part = carry.parts(order, first, [0, 1], None, True)[0]  # type: ignore[union-attr]
    kinds = dict(zip(positions.carried, part.kinds))
    assert kinds["rids"] == SPANS and kinds["output_ids"] == SPANS
    assert part.shape.widths[:2] == [34, 17]
    assert kinds["prompt_tokens"] == kinds["completion_tokens"] == NUMBERS
    assert kinds["retraction_counts"] == SAME and kinds["input_token_logprobs_val"] == AS_IS
    assert kinds["time_stats"] == ITEMS
