"""A shard's RidTable alone: fed BATCH frames and control messages in-process."""

from __future__ import annotations

from typing import Any

import pytest
from decoding import IMPLEMENTATIONS, table_on

from ring import link
from sglang_tok.finish import ABORT, Length, Stop
from sglang_tok.protocols.model import batch, columns, errors, output, packed
from sglang_tok.protocols.model.columns import ColumnsOut
from sglang_tok.protocols.model.control import Abort, Error, Open
from sglang_tok.protocols.model.deltas import DeltasOut, Usage
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_testkit.local_route import LocalRoute
from shards.byte_level.table import byte_level_table
from shards.messages.table import RidTable

INFO: TokenizerInfo = load("deepseek-v4")
TEXT = "Shards decode 多语言 text, emoji 👍🏽 too."
IDS = INFO.tokenizer.encode(TEXT, add_special_tokens=False).ids


def frame(rows: list[dict[str, Any]]) -> batch.Batch:
    return batch.decode_batch(batch.encode_batch(rows))


_ROUTES: dict[RidTable, LocalRoute] = {}  # keeps its tables alive: no id is reused


def route_of(table: RidTable, nshards: int = 1) -> LocalRoute:
    """The egress's routing for this table (one per table, as one egress per shard set)."""
    if table not in _ROUTES:
        _ROUTES[table] = LocalRoute(nshards)
    return _ROUTES[table]


def feed(table: RidTable, rows: list[dict[str, Any]], out: Any = None,
         nshards: int = 1) -> Any:
    """Route a frame as the egress does and hand this table its shard's message."""
    out = DeltasOut() if out is None else out
    route = route_of(table, nshards)
    msg = route(frame(rows)).get(table.shard)
    if msg is not None:
        parsed = link.parse(msg)
        assert isinstance(parsed, link.Arrays)
        table.on_arrays(parsed, out)
    if table.self_ended:
        route.self_ended(table.shard, table.self_ended)
        table.self_ended = []
    return out


def test_one_delta_per_row_exact_text_and_usage_on_the_last() -> None:
    t = RidTable(INFO, 0)
    deltas = []
    for k, tid in enumerate(IDS):
        last = k == len(IDS) - 1
        deltas += feed(t, [{"rid": "r", "ids": [tid], "prompt_tokens": 7, "cached_tokens": 2,
                            "finish": Length(1) if last else None}])
    assert len(deltas) == len(IDS)
    assert "".join(d.text for d in deltas) == TEXT
    assert [i for d in deltas for i in d.ids] == IDS
    assert all(d.usage is None for d in deltas[:-1])
    assert deltas[-1].usage == Usage(7, len(IDS), 7 + len(IDS), 2, 0)
    assert "r" not in t.live and "r" in t.ended and t.counters.finished == 1


def test_a_shard_gets_only_its_own_rows_of_a_frame() -> None:
    from egress.router import shard_of
    t = RidTable(INFO, 1)
    rows = [{"rid": f"r{k}", "ids": IDS[k:k + 2]} for k in range(8)]
    mine = [r["rid"] for r in rows if shard_of(r["rid"], 2) == 1]
    assert 0 < len(mine) < len(rows)
    out = feed(t, rows, nshards=2)
    assert [d.rid for d in out] == mine
    assert set(t.live) == set(mine)
    assert (t.counters.rows, t.counters.tokens) == (len(mine), 2 * len(mine))


def test_rows_of_an_ended_rid_are_ignored_and_counted() -> None:
    t = RidTable(INFO, 0)
    feed(t, [{"rid": "r", "ids": IDS[:1], "finish": Length(1)}])
    assert route_of(t)(frame([{"rid": "r", "ids": IDS[1:2]}])) == {}  # the egress's late row
    assert "r" not in t.live and "r" in t.ended
    # a shard that ended a rid itself may still get rows the egress routed before it knew
    t.on_open(Open("s", stop=["zz"]), DeltasOut())
    feed(t, [{"rid": "s", "ids": INFO.tokenizer.encode("a zz b", add_special_tokens=False).ids}])
    assert "s" in t.ended and t.counters.late_rows == 0
    route_of(t).router.self_ended(0, [])  # (the notice is handled in `feed`)


def test_open_options_reuse_and_duplicates() -> None:
    t = RidTable(INFO, 0)
    out = DeltasOut()
    t.on_open(Open("r", stream=False), out)
    t.on_open(Open("r"), out)  # live already: ignored
    assert out == [] and t.counters.ignored_opens == 1
    assert feed(t, [{"rid": "r", "ids": IDS[:3]}]) == []  # stream=False: no delta yet
    [last] = feed(t, [{"rid": "r", "ids": IDS[3:], "finish": Length(1)}])
    assert last.text == TEXT and last.ids == IDS
    route_of(t).open("r")  # the egress sees the OPEN first
    t.on_open(Open("r"), out)  # an ended rid may be reused
    assert len(feed(t, [{"rid": "r", "ids": IDS[:1]}])) == 1


def test_max_requests_refuses_new_rids_with_a_terminal_error() -> None:
    t = RidTable(INFO, 0, max_requests=1)
    feed(t, [{"rid": "a", "ids": IDS[:1]}])
    [refused] = feed(t, [{"rid": "b", "ids": IDS[:1]}])
    assert refused.rid == "b" and refused.finish == ABORT
    assert refused.error is not None and "--max-requests 1" in refused.error
    assert route_of(t).router.is_ended("b") and t.counters.rejected == 1  # told to the egress


def test_error_abort_and_drop_end_rids_with_their_held_text_flushed() -> None:
    t = RidTable(INFO, 0)
    emoji = INFO.tokenizer.encode("🦩", add_special_tokens=False).ids
    assert len(emoji) > 1  # one character over three ids: the first shows nothing yet
    first = feed(t, [{"rid": "e", "ids": emoji[:1]}, {"rid": "a", "ids": IDS[:1]},
                     {"rid": "d", "ids": IDS[:1]}])
    assert first[0].text == ""
    out = DeltasOut()
    t.on_error(Error("e", "boom"), out)
    t.on_abort(Abort(["a", "never-seen"]), out)
    t.on_drop(["d"], errors.MALFORMED_FRAME, out)
    for rid in ("e", "a", "d"):
        route_of(t).end(rid)
    by_rid = {d.rid: d for d in out}
    assert by_rid["e"].error == "boom" and by_rid["e"].text == "\ufffd"
    assert by_rid["a"].finish == ABORT and by_rid["a"].error is None
    assert by_rid["never-seen"].usage == Usage(0, 0, 0, 0, 0)
    assert by_rid["d"].error == errors.MALFORMED_FRAME
    assert t.live == {}


def test_out_of_vocabulary_ids_decode_to_nothing() -> None:
    t = RidTable(INFO, 0)
    [d] = feed(t, [{"rid": "r", "ids": [IDS[0], INFO.vocab_size + 5, -3, IDS[1]]}])
    assert d.text == INFO.tokenizer.decode(IDS[:2])
    assert d.ids == [IDS[0], INFO.vocab_size + 5, -3, IDS[1]]


def test_logprobs_only_on_the_rows_that_carry_them_in_both_sinks() -> None:
    rows = [{"rid": "p", "ids": IDS[:1], "output_logprobs": []},
            {"rid": "q", "ids": IDS[:2], "output_logprobs": [[-0.5, IDS[0]], [-1.0, IDS[1]]]}]
    plain = feed(RidTable(INFO, 0), rows)
    assert plain[0].logprobs is None
    assert plain[1].logprobs == [(-0.5, IDS[0]), (-1.0, IDS[1])]  # lists once on the wire
    cols = feed(RidTable(INFO, 0), rows, ColumnsOut())
    msg = output.decode_output(output.encode_output("columnar", 0, 0, cols))
    assert isinstance(msg, columns.Columns)
    assert msg.logprobs == [(1, [[-0.5, IDS[0]], [-1.0, IDS[1]]])]
    assert [d.text for d in msg.deltas] == [d.text for d in plain]


def test_columns_keep_each_rids_order() -> None:
    """A rid twice in one frame: its non-final row and its last row, both on the array
    path (last rows of plain requests are decoded with the others, in row order)."""
    t = RidTable(INFO, 0)
    cols = feed(t, [{"rid": "x", "ids": IDS[:1]},
                    {"rid": "y", "ids": IDS[:1], "finish": Length(1)},
                    {"rid": "x", "ids": IDS[1:2], "finish": Length(2)},
                    {"rid": "z", "ids": IDS[:1]}], ColumnsOut())
    msg = output.decode_output(output.encode_output("columnar", 0, 0, cols))
    assert isinstance(msg, columns.Columns)
    assert msg.rids == ["x", "y", "x", "z"]
    assert [r for r, _ in msg.finish] == [1, 2]
    assert "".join(t for r, t in zip(msg.rids, msg.texts) if r == "x") == \
        INFO.tokenizer.decode(IDS[:2])


def test_a_second_last_row_in_the_same_frame_is_late_not_an_error() -> None:
    """Found by the ring fuzz: a frame that ends the same rid twice (and carries a row
    after that). The first last row ends it; the others are late rows, not a crash."""
    t = table_on(INFO, "vectorised")
    feed(t, [{"rid": "r", "ids": IDS[:2]}])
    fin = Length(3)
    out = feed(t, [{"rid": "r", "ids": IDS[2:3], "finish": fin},
                   {"rid": "r", "ids": IDS[3:4], "finish": fin},
                   {"rid": "r", "ids": IDS[4:5]}])
    assert [d.finish for d in out] == [fin]
    assert t.counters.late_rows == 2 and "r" in t.ended


def test_rows_without_ids_in_small_and_large_messages() -> None:
    """Found by the ring fuzz: a running row with no ids (a scheduler step that produced
    nothing for it) beside rows with ids, by each decoder implementation."""
    for implementation in IMPLEMENTATIONS:
        t = table_on(INFO, implementation)
        out = feed(t, [{"rid": "a", "ids": IDS[:1]}, {"rid": "b", "ids": []}],
                   output.output_sink("packed"))
        out = feed(t, [{"rid": "a", "ids": []}, {"rid": "b", "ids": IDS[:2]}], out)
        msg = output.decode_output(output.encode_output("packed", 0, 0, out))
        assert [(d.rid, d.ids) for d in msg.deltas] == [("a", IDS[:1]), ("b", []), ("a", []),
                                                        ("b", IDS[:2])]


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_last_rows_on_the_array_path_in_every_output_format(implementation: str) -> None:
    """Last rows of plain requests are decoded with the other rows of their message: the
    scheduler's stop token left out of the text, a character cut by the end flushed as
    U+FFFD, the final usage once (not also the continuous one), in every output format,
    by the id lookup and by the reference loop."""
    assert byte_level_table(INFO) is not None
    cut = [byte_level_table(INFO).kept.index(bytes([0xF0]))]  # a 4-byte character's first byte
    stop = IDS[-1]
    for make in (DeltasOut, ColumnsOut, packed.PackedOut):
        t = table_on(INFO, implementation)
        for k in range(3):
            t.on_open(Open(f"u{k}", continuous_usage=True), DeltasOut())
        first = [{"rid": f"u{k}", "ids": IDS[:3], "prompt_tokens": 5} for k in range(3)]
        out: Any = feed(t, first, make())
        last = [{"rid": "u0", "ids": IDS[3:5], "finish": Length(5),
                 "prompt_tokens": 5, "reasoning_tokens": 1},
                {"rid": "u1", "ids": [*IDS[3:5], stop], "prompt_tokens": 6,
                 "finish": Stop(stop)},
                {"rid": "u2", "ids": cut[:1], "prompt_tokens": 5, "cached_tokens": 2,
                 "finish": Length(4)}]
        out = feed(t, last, make())
        if isinstance(out, ColumnsOut):
            encoded = output.encode_output("columnar", 0, 0, out)
            msg = output.decode_output(encoded)
            assert isinstance(msg, (columns.Columns, packed.Packed))
            deltas = {d.rid: d for d in msg.deltas}
            rows = [r for r, _ in msg.usage]
            assert rows == sorted(set(rows)) and len(rows) == 3  # once each, in row order
        else:
            deltas = {d.rid: d for d in out}
        assert deltas["u0"].text == INFO.tokenizer.decode(IDS[3:5])
        assert deltas["u0"].usage == Usage(5, 5, 10, 0, 1)
        assert deltas["u1"].text == INFO.tokenizer.decode(IDS[3:5])
        assert deltas["u1"].ids == [*IDS[3:5], stop]
        assert deltas["u1"].usage == Usage(6, 6, 12, 0, 0)
        assert deltas["u2"].text == INFO.tokenizer.decode(cut) == "\ufffd"
        assert deltas["u2"].usage == Usage(5, 4, 9, 2, 0)
        assert all(d.finish is not None for d in deltas.values())
        assert t.live == {}
