"""The array path against the per-row reference and the full decode.

Every way a shard decodes the same rows must agree with a per-row request's decoding (the
reference, one row at a time): each tokenizer family's reference loop and its vectorised
implementation (shards/decoders.py; the id lookup for byte-level BPE, whole arrays for
byte fallback); and every request's text must equal the full `tokenizer.decode` (section
5, rule 2).
The service-level property drives the shard's table through the egress's own routing
(`LocalRoute`: slots taken, freed and reused) with frames that mix plain requests and
requests on the per-row path, rows of 1-4 ids, prompts, and specials skipped and not.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from decoding import IMPLEMENTATIONS, decoding, table_on, tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_tok.finish import Stop
from sglang_tok.kit.sync_frontend import RequestOutput
from sglang_tok.kit.workload import PlanSpec, make_requests, schedule, verify
from sglang_tok.protocols.model import batch
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta, DeltasOut
from sglang_tok.tokenizer import TokenizerInfo, describe
from sglang_tok_testkit import zoo
from sglang_tok_testkit.local_route import LocalRoute
from shards.byte_level.table import byte_level_table
from shards.decoders import decoders_for
from shards.decoding.slots import Slots
from shards.messages.paths import row_reason

# the ways a shard decodes a message of plain rows: each family's reference loop, and its
# vectorised implementation forced on every message it takes (tests/decoding.py)
PATHS = IMPLEMENTATIONS


def run_service_in_process(info: TokenizerInfo, spec: PlanSpec, nshards: int,
                           path: str) -> tuple[list[str], dict[str, int]]:
    """Every frame of a plan through routing and the shards' tables; the problems found."""
    reqs = make_requests(info, spec)
    route = LocalRoute(nshards)
    tables = [table_on(info, path, k) for k in range(nshards)]
    outs: dict[str, list[Delta]] = {}
    for step in schedule(reqs, spec.concurrency, spec.seed):
        for f in [*step.opens, *([step.batch] if step.batch else []), *step.ends]:
            sinks = [DeltasOut() for _ in range(nshards)]
            route.feed(f, tables, sinks)
            for sink in sinks:
                for d in sink:
                    outs.setdefault(d.rid, []).append(d)
    problems = []
    for r in reqs:
        out = RequestOutput(r.rid, 0, outs.get(r.rid, []), True)
        problems += verify(r, out, info)
    paths: dict[str, int] = {}
    for t in tables:
        for k, v in t.paths.items():
            paths[k] = paths.get(k, 0) + v
    return problems, paths


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["deepseek-v4", "trained-bpe", "llama2-style", "unigram-fallback"]),
       seed=st.integers(0, 10_000),
       nshards=st.sampled_from([1, 2, 3]), path=st.sampled_from(sorted(PATHS)),
       ids_per_row=st.sampled_from([(1, 1), (1, 4)]))
def test_array_path_per_row_path_and_full_decode_agree(name: str, seed: int, nshards: int,
                                                       path: str,
                                                       ids_per_row: tuple[int, int]) -> None:
    """Every plain row on the whole-array code, on the id-lookup path (rows of one id) or
    on the loop. Byte-level BPE and SentencePiece byte fallback (held byte runs, the
    leading-space strip) alike."""
    info = tokenizer(name)
    spec = PlanSpec(requests=120, concurrency=24, ids_per_row=ids_per_row, min_tokens=2,
                    max_tokens=24, logprob_share=0.2, stop_share=0.15, options_share=0.3,
                    special_share=0.2, abort_share=0.05, error_share=0.05, prompt_share=0.3,
                    seed=seed)
    problems, paths = run_service_in_process(info, spec, nshards, path)
    assert not problems, problems[:5]
    assert paths.get("array", 0) > 0 and sum(paths.values()) > paths["array"]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_slots_are_reused_after_requests_end(path: str) -> None:
    info = tokenizer("deepseek-v4")
    spec = PlanSpec(requests=300, concurrency=8, min_tokens=2, max_tokens=6, seed=5)
    route = LocalRoute(1)
    problems, _ = run_service_in_process(info, spec, 1, path)
    assert not problems
    reqs = make_requests(info, spec)
    table = table_on(info, path)
    for step in schedule(reqs, spec.concurrency, spec.seed):
        for f in [*step.opens, *([step.batch] if step.batch else []), *step.ends]:
            route.feed(f, [table], [DeltasOut()])
    assert route.router.pools[0].next <= spec.concurrency + 1  # 300 requests, <= 9 slots
    assert table.state.capacity == Slots().capacity  # never grew


def test_the_path_is_decided_once_with_a_reason() -> None:
    info = tokenizer("deepseek-v4")
    assert row_reason(None, info, True) is None
    assert row_reason(Open("r", prompt_ids=[1, 2]), info, True) is None
    assert row_reason(Open("r", skip_special_tokens=False), info, True) is None
    assert row_reason(Open("r", stop=["x"]), info, True) == "stop"
    assert row_reason(Open("r", stream=False), info, True) == "stream_false"
    assert row_reason(Open("r", tool_parser="hermes"), info, True) == "parser"
    # logprob token texts are a lookup in the tokenizer's table: the array path has them
    assert row_reason(Open("r", logprob_text=True), info, True) is None
    assert row_reason(Open("r", continuous_usage=True), info, True) is None
    # attribution: from the ids' byte lengths on byte-level BPE; per row on byte fallback
    assert row_reason(Open("r", attribution=True), info, True) is None
    assert row_reason(Open("r", attribution=True), tokenizer("llama2-style"), True) == \
        "attribution"
    assert row_reason(None, info, False) == "tokenizer"
    # which tokenizers have an array decoder: byte-level BPE and SentencePiece byte fallback
    assert decoders_for(describe(zoo.wordpiece(), "wp")).array is None
    assert decoders_for(describe(zoo.metaspace_byte_fallback_bpe(), "sp")).array is not None
    assert decoders_for(info).array is not None


def test_held_tails_are_what_the_incremental_codec_holds() -> None:
    """Every 1-3 byte tail of a row: held exactly when `codecs.utf_8_decode(..., final=False)`
    holds it (CPython holds a surrogate's first two bytes, ED A0..BF, for instance)."""
    from codecs import utf_8_decode

    from shards.byte_fallback.held_bytes import held_tail

    tails = [bytes([a]) for a in range(256)]
    tails += [bytes([a, b]) for a in range(0xC0, 0x100) for b in range(0x70, 0xC8)]
    tails += [bytes([a, b, c]) for a in range(0xE0, 0xF8) for b in range(0x7F, 0xC1, 3)
              for c in range(0x7F, 0xC1, 7)]
    buf = np.frombuffer(b"".join(b"x" + t for t in tails), np.uint8)
    sizes = np.array([1 + len(t) for t in tails], np.int64)
    ends = np.cumsum(sizes)
    held = held_tail(buf, ends, ends - sizes).tolist()
    expected = [len(t) + 1 - utf_8_decode(b"x" + t, "replace", False)[1] for t in tails]
    assert held == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(["deepseek-v4", "trained-bpe", "llama2-style"]),
       words=st.lists(st.sampled_from(["héllo", "世界", "🙂", "end", "STOP", " ", "\n", "ok."]),
                      min_size=1, max_size=400),
       cut=st.integers(1, 30), prompt=st.booleans(), path=st.sampled_from(sorted(PATHS)),
       kept=st.sampled_from(["", "whole", "through"]))
def test_a_scheduler_matched_stop_string_is_cut_as_on_the_per_row_path(
        name: str, words: list[str], cut: int, prompt: bool, path: str, kept: str) -> None:
    """Rule 3 needs the text a request already sent: a plain request's last row looks back
    on what its shard sent (`ending.SentLog`). Long outputs, prompts that end
    mid-character, and stop strings that begin in earlier rows: the deltas equal those of
    a per-row `Request` fed the same rows; so too with no_stop_trim, the whole text kept
    or (trim_after_stop, SGLang 0.5.14 on) cut after the stop string."""
    from shards.messages.request import Request

    info = tokenizer(name)
    tok = info.tokenizer
    ids = tok.encode("".join(words), add_special_tokens=False).ids
    text = tok.decode(ids)
    matched = text[-cut:] if text else "x"
    if kept == "through" and len(text) > cut + 2:  # a stop string with text after it
        matched = text[-cut - 2:-2]
    prompt_ids = tok.encode("前置🙂", add_special_tokens=False).ids[:-1] if prompt else []
    opts = Open("r", prompt_ids=prompt_ids, no_stop_trim=bool(kept),
                trim_after_stop=True if kept == "through" else msgspec.UNSET)
    ref = Request("r", info, opts)
    table = table_on(info, path)
    route = LocalRoute(1)
    route.open("r")
    table.on_open(opts, DeltasOut())
    fin = Stop(matched)
    got = DeltasOut()
    want: list[Delta] = []
    for k in range(0, len(ids), 3):
        last = k + 3 >= len(ids)
        row = {"rid": "r", "ids": ids[k:k + 3], "finish": fin if last else None}
        route.feed(batch.encode_batch([row]), [table], [got])
        d = ref.row(ids[k:k + 3], fin if last else None, 0, 0, 0)
        if d is not None:
            want.append(d)
    assert [(d.text, d.finish) for d in got] == [(d.text, d.finish) for d in want]
    if kept == "whole" and not prompt:  # (a prompt changes how the first piece decodes)
        assert "".join(d.text for d in got) == text
    elif kept == "through" and not prompt:  # cut after it, but never what was sent
        sent = "".join(d.text for d in got[:-1])
        assert "".join(d.text for d in got) == \
            text[:max(len(sent), text.rfind(matched) + len(matched))]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_held_byte_does_not_join_the_broken_bytes_before_it_to_the_next_row(path: str) -> None:
    """Found by a property test of an earlier whole-array decoder: E5 A7 C2 holds C2 and
    sends U+FFFD for E5 A7; with C2 cut off, E5 A7 must not join the next row's A1 into one
    character (U+59E1)."""
    info = tokenizer("deepseek-v4")
    t = byte_level_table(info).kept
    assert t is not None
    e5a7, c2, a1 = (next(i for i in range(info.vocab_size) if t[i] == b)
                    for b in (b"\xe5\xa7", b"\xc2", b"\xa1"))
    table = table_on(info, path)
    got = DeltasOut()
    LocalRoute(1).feed(batch.encode_batch([{"rid": "a", "ids": [e5a7, c2]},
                                              {"rid": "b", "ids": [a1]}]), [table], [got])
    refs = [decoding(info)[0], decoding(info)[0]]
    assert [d.text for d in got] == [refs[0]([e5a7, c2]), refs[1]([a1])] \
        == ["\ufffd", "\ufffd"]
