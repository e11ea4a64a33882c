"""Attribution on the array path against the per-row path (issue 17, item 4).

A byte-level request whose only extra option is `attribution` stays on the array path
(shards/byte_level/attribution.py); its deltas must carry exactly what the per-row path's `Attributor`
gives: the same texts, the same [token_id, kind, byte_offset] entries in the same deltas.
The reference here is the same shard table with the old rule (attribution per row), fed
the same frames; both must also decode to the full text (section 5, rule 2). The frames
mix what makes anchors move: multi-id rows, specials skipped and kept, prompts that end
mid-character, ids whose bytes are broken UTF-8, out-of-vocabulary ids, last rows whose
stop token is left out (or a matched stop string: that row goes per row), ABORT and
ERROR, requests without attribution beside them; every output format.
"""

from __future__ import annotations

import os
from typing import Any

from decoding import MIXED, TEXTS, table_on, tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_tok.finish import Finish, Length, Stop, stop_string
from sglang_tok.kit.sync_frontend import RequestOutput
from sglang_tok.kit.workload import PlannedRequest, schedule, verify
from sglang_tok.protocols.model import batch
from sglang_tok.protocols.model.columns import ColumnsOut
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta, DeltasOut
from sglang_tok.protocols.model.packed import PackedOut
from sglang_tok.tokenizer import TokenizerInfo
from sglang_tok_testkit.local_route import LocalRoute
from shards.byte_level.table import byte_level_table
from shards.messages.paths import PathRule, row_reason

FORMATS = ("deltas", "columnar", "packed")


def _per_row_rule(opts: Open | None, info: TokenizerInfo, array_decoder: bool) -> str | None:
    """The rule before attribution joined the array path: the reference."""
    why = row_reason(opts, info, array_decoder)
    if why is None and opts is not None and opts.attribution:
        return "attribution"
    return why


# how a shard decodes a message's plain rows (tests/decoding.py): the reference loop, the
# id lookup on every message it takes, and "mixed": the loop below 3 rows, the lookup from 3
PATHS = MIXED


def _run(info: TokenizerInfo, reqs: list[PlannedRequest], concurrency: int, seed: int,
         nshards: int, path: str, fmt: str, rule: PathRule = row_reason
         ) -> tuple[dict[str, list[Delta]], dict[str, int]]:
    route = LocalRoute(nshards)
    tables = [table_on(info, path, k, path_rule=rule) for k in range(nshards)]
    outs: dict[str, list[Delta]] = {}
    for step in schedule(reqs, concurrency, seed):
        for f in [*step.opens, *([step.batch] if step.batch else []), *step.ends]:
            sinks: list[Any] = [DeltasOut() if fmt == "deltas" else
                                ColumnsOut() if fmt == "columnar" else PackedOut()
                                for _ in range(nshards)]
            route.feed(f, tables, sinks)
            for sink in sinks:
                if isinstance(sink, PackedOut):
                    deltas = sink.build_packed(0, 0).deltas
                elif isinstance(sink, ColumnsOut):
                    deltas = sink.build(0, 0).deltas
                else:
                    deltas = sink
                for d in deltas:
                    outs.setdefault(d.rid, []).append(d)
    paths: dict[str, int] = {}
    for t in tables:
        for k, v in t.paths.items():
            paths[k] = paths.get(k, 0) + v
    return outs, paths


def _view(deltas: list[Delta]) -> list[tuple[Any, ...]]:
    return [(d.text, d.ids, None if d.attributions is None else [tuple(a) for a in d.attributions],
             d.finish, d.error) for d in deltas]


@st.composite
def plans(draw: st.DrawFn, info: TokenizerInfo) -> list[PlannedRequest]:
    tok = info.tokenizer
    vocab = info.vocab_size
    corpus = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
    specials = sorted(info.special_ids)
    # ids whose bytes are not whole characters (a lead byte alone, continuation bytes)
    assert byte_level_table(info) is not None
    partial = [i for i in range(min(vocab, 600))
               if info.token_texts.get(i, "") and "\ufffd" in info.token_texts[i]][:40]
    prompt_cut = tok.encode("前置🙂", add_special_tokens=False).ids
    reqs = []
    widest = draw(st.sampled_from([1, 4]))  # 1: messages of one id per row (id lookup)
    for n in range(draw(st.integers(1, 10))):
        ids: list[int] = []
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["text", "text", "text", "random", "special", "partial",
                                         "oov"]))
            if kind == "text":
                seq = draw(st.sampled_from(corpus))
                a = draw(st.integers(0, len(seq) - 1))
                ids += seq[a:a + draw(st.integers(1, 12))]
            elif kind == "random":
                ids += draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5))
            elif kind == "special" and specials:
                ids.append(draw(st.sampled_from(specials)))
            elif kind == "partial" and partial:
                ids += draw(st.lists(st.sampled_from(partial), min_size=1, max_size=4))
            else:
                ids.append(vocab + draw(st.integers(0, 3)))
            if specials and draw(st.integers(0, 2)) == 0:  # a special after text, often
                ids.append(draw(st.sampled_from(specials)))
        chunks, i = [], 0
        while i < len(ids):
            k = draw(st.integers(1, widest))
            chunks.append(ids[i:i + k])
            i += k
        how = draw(st.sampled_from(["length", "token", "token", "tokens", "string", "abort",
                                    "error"]))
        finish: Finish | None = Length(len(ids))
        end_by = ""
        if how == "token":
            finish = Stop(ids[-1])
        elif how == "tokens":
            finish = Stop([ids[-1], 7])
        elif how == "string":
            text = tok.decode([x for x in ids if 0 <= x < vocab])
            finish = Stop(text[-3:] or "zz")
        elif how in ("abort", "error"):
            finish, end_by = None, how
        opts: dict[str, Any] = {"attribution": draw(st.integers(0, 5)) > 0,
                                "skip_special_tokens": draw(st.booleans()),
                                "no_stop_trim": draw(st.integers(0, 4)) == 0}
        if draw(st.booleans()):
            opts["prompt_ids"] = draw(st.sampled_from(
                [prompt_cut[:-1], prompt_cut[:-2], prompt_cut, corpus[0][:3]]))
        if draw(st.integers(0, 4)) == 0:
            opts["continuous_usage"] = True
        rid = f"r{n}"
        req = PlannedRequest(rid, ids, chunks, finish, Open(rid, **opts), end_by,
                             prompt_tokens=5, cached_tokens=1)
        reqs.append(req)
    return reqs


@settings(max_examples=int(os.environ.get('ATTR_EXAMPLES', 120)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(name=st.sampled_from(["deepseek-v4", "trained-bpe"]), data=st.data(),
       concurrency=st.integers(1, 8), seed=st.integers(0, 1000),
       nshards=st.sampled_from([1, 2]), path=st.sampled_from(sorted(PATHS)),
       fmt=st.sampled_from(FORMATS))
def test_array_path_attributions_equal_the_per_row_paths(
        name: str, data: st.DataObject, concurrency: int, seed: int, nshards: int,
        path: str, fmt: str) -> None:
    """Each way a shard decodes plain rows (`PATHS`: the ordered loop, the id lookup, the small
    loop, the two loops message by message)."""
    info = tokenizer(name)
    reqs = data.draw(plans(info))
    got, paths = _run(info, reqs, concurrency, seed, nshards, path, fmt)
    want, ref_paths = _run(info, reqs, concurrency, seed, nshards, path, "deltas", _per_row_rule)
    # every request that got a row took the array path here; there, the attributing ones
    # took the per-row path
    bound = sum(paths.values())
    assert paths.get("array", 0) == bound
    assert sum(ref_paths.values()) == bound
    assert set(ref_paths) <= {"array", "attribution"}
    for r in reqs:
        assert _view(got.get(r.rid, [])) == _view(want.get(r.rid, [])), r
        if r.finish is None or stop_string(r.finish) is None:  # (`verify` has no rule 3)
            problems = verify(r, RequestOutput(r.rid, 0, got.get(r.rid, []), True), info)
            assert not problems, problems
        if r.opts is not None and r.opts.attribution and not r.end_by:
            flat = [a for d in got[r.rid] for a in d.attributions or []]
            assert len(flat) == len(r.ids)  # one entry per id, a stop token's included


def test_attribution_rows_stay_on_the_array_path_with_carried_ids() -> None:
    """A character split over rows: the lead byte's id waits, then both are anchored at 0
    of the delta that completes it; a skipped special after a waiting id waits too."""
    info = tokenizer("deepseek-v4")
    assert byte_level_table(info) is not None
    t = byte_level_table(info).kept
    e4, b8, ad = (next(i for i in range(info.vocab_size) if t[i] == b)
                  for b in (b"\xe4", b"\xb8", b"\xad"))
    eos = min(info.special_ids)
    x = info.tokenizer.encode("x", add_special_tokens=False).ids[0]
    rows = [[x, e4], [eos, b8], [ad, x], [x]]
    for path in sorted(PATHS):
        table = table_on(info, path)
        route = LocalRoute(1)
        route.open("r")
        table.on_open(Open("r", attribution=True), DeltasOut())
        got = DeltasOut()
        for k, ids in enumerate(rows):
            fin = Stop(x) if k == len(rows) - 1 else None
            route.feed(batch.encode_batch([{"rid": "r", "ids": ids, "finish": fin}]),
                       [table], [got])
        assert table.paths == {"array": 1}
        assert [(d.text, d.attributions) for d in got] == [
            ("x", [(x, 0, 0)]),
            ("", []),
            ("中x", [(e4, 0, 0), (eos, 1, 0), (b8, 0, 0), (ad, 0, 0), (x, 0, 3)]),
            ("", [(x, 1, 0)]),
        ]
