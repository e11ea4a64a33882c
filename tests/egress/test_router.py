"""The egress's Router alone: owners, first and last rows, quarantine, failing a shard."""

from __future__ import annotations

from typing import Any

from egress.router import ENGINE_BATCH_MESSAGES, TRIM_EVERY, Router, shard_of
from sglang_tok.finish import ABORT
from sglang_tok.protocols.model import batch as native_batch
from sglang_tok.protocols.model import deltas as native_deltas
from sglang_tok.protocols.model import errors
from sglang_tok.protocols.model.interface import LATE


def test_shard_of_is_crc32_of_utf8_modulo_n() -> None:
    # literals computed once by hand: crc32(b"abc") = 0x352441C2 (the standard check value)
    assert shard_of("abc", 4) == 2
    assert shard_of("abc", 3) == 0
    assert shard_of("req-1", 4) == 1  # crc32 1829706545
    assert shard_of("req-2", 4) == 3  # crc32 4094053003
    assert shard_of("é-rid", 8) == 4  # crc32 2688847404, of the UTF-8 bytes
    assert shard_of("req-1", 1) == 0


def batch(*rows: tuple[str, int, dict[str, Any] | None], prompt: int = 10,
          cached: int = 4) -> native_batch.Batch:
    """Rows of (rid, number of ids, finish)."""
    return native_batch.decode_batch(native_batch.encode_batch([
        {"rid": rid, "ids": list(range(k)), "finish": fin, "prompt_tokens": prompt,
         "cached_tokens": cached} for rid, k, fin in rows]))


DONE = {"type": "length", "length": 1}


def test_route_owners_first_rows_and_last_rows() -> None:
    r = Router(4)
    owner, tokens, finished = r.route(batch(("req-1", 1, None), ("req-2", 2, None)))
    assert owner == [1, 3]
    assert tokens == 3 + 2 * (10 - 4)  # new ids plus computed prompt tokens of first rows
    assert finished == {}
    owner, tokens, finished = r.route(batch(("req-2", 3, DONE), ("req-1", 1, None)))
    assert owner == [3, 1] and tokens == 4
    [(rid, st)] = finished[3]
    assert rid == "req-2" and st.first == 1  # its usage is counted only if its shard dies
    assert r.is_ended("req-2") and "req-2" not in r.live
    owner, _, _ = r.route(batch(("req-2", 1, None), ("req-1", 1, None)))
    assert owner == [LATE, 1]  # an ended rid's rows reach no shard


def test_open_reuses_an_ended_rid_and_counts_only_its_new_rows() -> None:
    r = Router(2)
    r.route(batch(("abc", 4, DONE)))
    assert r.open("abc") == shard_of("abc", 2)
    r.route(batch(("abc", 2, None)))
    [delta] = r.fail_shard(shard_of("abc", 2), errors.SHARD_RESTARTED)
    assert delta.usage is not None and delta.usage.completion_tokens == 2


def test_quarantine_holds_back_unknown_rids_but_not_opened_ones() -> None:
    r = Router(2)
    r.quarantine = True
    r.open("req-1")
    owner, _, _ = r.route(batch(("req-1", 1, None), ("req-2", 1, None)))
    assert owner == [shard_of("req-1", 2), LATE]
    assert r.suspects == ["req-2"]


def test_fail_shard_fails_live_and_unacked_ended_rids_with_exact_usage() -> None:
    r = Router(4)
    # req-1 -> shard 1, req-2 -> shard 3, e0-1000-17 -> shard 1 (crc32 2367131253)
    r.route(batch(("req-1", 2, None), ("req-2", 1, None), ("e0-1000-17", 1, None)))
    r.dispatched(1)
    _, _, fin = r.route(batch(("req-1", 3, None), ("e0-1000-17", 4, DONE)))
    r.dispatched(1, fin[1])
    r.route(batch(("req-1", 1, None), ("req-2", 1, None)))
    r.dispatched(1)
    deltas = {d.rid: d for d in r.fail_shard(1, errors.SHARD_RESTARTED)}
    assert set(deltas) == {"req-1", "e0-1000-17"}
    assert deltas["req-1"].usage == native_deltas.Usage(10, 6, 16, 4, 0)
    assert deltas["e0-1000-17"].usage == native_deltas.Usage(10, 5, 15, 4, 0)
    assert all(d.error == errors.SHARD_RESTARTED and d.finish == ABORT
               for d in deltas.values())
    assert "req-2" in r.live and r.fail_shard(1, "again") == []


def settled(r: Router, shard: int, count: int) -> None:
    """Acks of `count` messages, then enough outputs for their deltas to have left."""
    r.acked(shard, count, 0)
    r.acked(shard, count, r.ledgers[shard].keep)


def test_an_acked_ending_is_failed_until_its_delta_cannot_be_queued_any_more() -> None:
    """The shard's ack says processed, not sent: its last delta may still be in the shard's
    output queue (--link-capacity messages and libzmq's batch) when the shard dies."""
    r = Router(1, output_queue=10)
    keep = r.ledgers[0].keep
    assert keep == 10 + ENGINE_BATCH_MESSAGES
    _, _, fin = r.route(batch(("req-1", 2, DONE)))
    r.dispatched(0, fin[0])
    # acknowledged once (for the journal), with the usage the shard counted
    assert r.acked(0, 1, 5, [("req-1", 2, 0)]) == ["req-1"]
    assert r.acked(0, 1, 5 + keep - 1) == []
    [d] = r.fail_shard(0, errors.SHARD_RESTARTED)
    assert d.rid == "req-1" and d.usage == native_deltas.Usage(10, 2, 12, 4, 0)
    _, _, fin = r.route(batch(("req-2", 3, DONE)))
    r.dispatched(0, fin[0])
    r.acked(0, 1, 0)
    r.acked(0, 1, keep)  # `keep` outputs later: its last delta has left the shard
    assert r.fail_shard(0, errors.SHARD_RESTARTED) == [] and not r.ending


def test_the_usage_an_ack_carries_is_final_and_frees_the_frame_log() -> None:
    r = Router(1, output_queue=0)
    r.route(batch(("req-1", 2, None)))
    _, _, fin = r.route(batch(("req-1", 3, DONE)))
    r.dispatched(0, fin[0])
    assert r.acked(0, 1, 1, [("req-1", 5, 2)]) == ["req-1"]
    for _ in range(TRIM_EVERY):  # the log is trimmed every TRIM_EVERY frames
        r.route(batch(("next", 1, None)))
    assert r.log[0][0] == 3  # req-1's frames are gone: its usage no longer needs them
    [d] = [d for d in r.fail_shard(0, errors.SHARD_RESTARTED) if d.rid == "req-1"]
    assert d.usage == native_deltas.Usage(10, 5, 15, 4, 2)  # the shard's count


def test_rids_a_shard_ended_itself_are_failed_while_their_delta_may_be_queued() -> None:
    r = Router(1, output_queue=0)
    r.route(batch(("req-1", 2, None)))
    r.dispatched(0)
    r.self_ended(0, ["req-1"])  # a stop string: the shard sent its last delta
    assert "req-1" not in r.live
    [d] = r.fail_shard(0, errors.SHARD_RESTARTED)
    assert d.rid == "req-1" and d.usage is not None and d.usage.completion_tokens == 2
    r.route(batch(("req-2", 2, None)))
    r.dispatched(0)
    r.self_ended(0, ["req-2"])
    settled(r, 0, 1)
    assert r.fail_shard(0, errors.SHARD_RESTARTED) == []


def test_frame_log_keeps_only_what_a_failure_may_need_and_folds_beyond_its_bound() -> None:
    r = Router(1, log_frames=3)
    r.route(batch(("req-1", 1, None)))
    for _ in range(10):  # req-2 comes and goes; req-1 lives on across more frames than kept
        r.route(batch(("req-1", 2, None), ("req-2", 1, None)))
    assert len(r.log) == 3
    _, _, fin = r.route(batch(("req-2", 1, DONE)))
    r.dispatched(0, fin[0])
    settled(r, 0, 1)
    [delta] = r.fail_shard(0, errors.SHARD_RESTARTED)
    assert delta.rid == "req-1" and delta.usage is not None
    assert delta.usage.completion_tokens == 1 + 10 * 2
    _, _, fin = r.route(batch(("req-3", 1, DONE)))
    r.dispatched(0, fin[0])
    settled(r, 0, 2)
    r.route(batch(("req-4", 1, DONE)))
    while r.frames % TRIM_EVERY:  # the log is trimmed every TRIM_EVERY frames
        r.route(batch((f"req-{r.frames + 1}", 1, DONE)))
    assert [f for f, _, _ in r.log] == [r.frames]  # no live rid needs older frames


def test_rows_after_a_rids_last_row_do_not_count_in_its_usage() -> None:
    r = Router(1)
    r.route(batch(("req-1", 2, None)))
    _, _, fin = r.route(batch(("req-1", 1, DONE)))
    r.dispatched(0, fin[0])
    owner, _, _ = r.route(batch(("req-1", 5, None)))  # late: the scheduler sent it anyway
    assert owner == [LATE]
    [delta] = r.fail_shard(0, errors.SHARD_RESTARTED)
    assert delta.usage == native_deltas.Usage(10, 3, 13, 4, 0)


def test_a_rid_ended_in_a_frame_keeps_its_rows_while_another_rid_is_live() -> None:
    r = Router(1)
    r.route(batch(("req-1", 2, None)))
    r.route(batch(("req-2", 1, None), ("req-1", 1, None)))
    _, _, fin = r.route(batch(("req-1", 1, DONE), ("req-2", 1, None)))
    r.dispatched(0, fin[0])
    deltas = {d.rid: d.usage for d in r.fail_shard(0, errors.SHARD_RESTARTED)}
    assert deltas == {"req-1": native_deltas.Usage(10, 4, 14, 4, 0),
                      "req-2": native_deltas.Usage(10, 2, 12, 4, 0)}
