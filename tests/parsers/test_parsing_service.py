"""Issue 11 against the real service: parsers, min_tokens and `--tokenizer none` end to end.

Every expectation is `parse_full` of the whole decode of the same ids (test_parsing_wire's
`reference`), so a streamed result that differs from the batch result in any channel fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_service import LocalService
from parsing_cases import (
    DS,
    DS_OUTPUT,
    QWEN_OUTPUT,
    channels,
    enc,
    qwen_style,
    ref_channels,
    reference,
)
from strategies import chunk

from sglang_tok.finish import ABORT, Finish, Length, Stop
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo

PARSED = {"reasoning_parser": "deepseek-r1", "tool_parser": "deepseekv4"}


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    with LocalService(tmp_path_factory.mktemp("ds"), shards=2) as svc:
        yield svc


def drive(svc: LocalService, reqs: dict[str, tuple[dict[str, Any], list[list[int]]]],
          finish: Finish | None = None) -> dict[str, list[Delta]]:
    """OPEN each rid, send their rows interleaved one step per row index, end each with
    `finish` (default: length) on its last row; return each rid's deltas."""
    assert svc.sched is not None and svc.front is not None
    for rid, (opts, _) in reqs.items():
        svc.sched.open(rid, **opts)
    steps = max(len(rows) for _, rows in reqs.values())
    for n in range(steps):
        rids, ids, fins = [], [], []
        for rid, (_, rows) in reqs.items():
            if n < len(rows):
                rids.append(rid)
                ids.append(rows[n])
                fins.append((finish or Length()) if n == len(rows) - 1 else None)
        svc.sched.step(rids, ids, finish_reasons=fins, prompt_tokens=[7] * len(rids))
        svc.front.poll(0)
    svc.barrier()
    out = {}
    for rid in reqs:
        got = svc.front.requests[rid]
        assert got.finished, rid
        out[rid] = got.deltas
    assert not svc.front.violations, svc.front.violations[:5]
    return out


def expect(info: TokenizerInfo, rid: str, opts: dict[str, Any], ids: list[int]) -> Any:
    return ref_channels(reference(info, Open(rid, **opts), ids))


def test_reasoning_and_tool_calls_in_rows_of_1_and_4_ids_equal_parse_full(ds: LocalService) -> None:
    ids = enc(DS, DS_OUTPUT)
    reqs = {f"rt{size}-{k}": (PARSED, chunk(ids, [size])) for size in (1, 4) for k in range(3)}
    reqs["plain"] = ({}, chunk(ids, [1]))
    out = drive(ds, reqs)
    want = expect(DS, "x", PARSED, ids)
    assert want[2] and want[3]  # two calls, and the request ended with calls
    for rid, deltas in out.items():
        assert [i for d in deltas for i in d.ids] == ids, rid  # ids are never held
        if rid == "plain":
            assert "".join(d.text for d in deltas) == DS.tokenizer.decode(ids)
            assert all(not d.reasoning and not d.tool_calls for d in deltas)
            continue
        assert channels(deltas) == want, rid
        assert deltas[-1].finish == Length(tool_calls=True)
        assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == len(ids)


def test_stop_strings_cut_content_never_reasoning(ds: LocalService) -> None:
    ids = enc(DS, DS_OUTPUT)
    opts = {**PARSED, "stop": ["東京", "now"]}
    out = drive(ds, {"st": (opts, chunk(ids, [2]))})["st"]
    text, reasoning, calls, _ = channels(out)
    assert "東京" in reasoning and text == "\n\nChecking " and not calls
    assert out[-1].finish == Stop("now")
    assert out[-1].usage is not None and out[-1].usage.prompt_tokens == 7
    assert channels(out) == expect(DS, "st", opts, ids)


def test_min_tokens_exempts_the_first_ids_from_stop_strings(ds: LocalService) -> None:
    ids = enc(DS, "ab STOP cd STOP ef")
    k = len(enc(DS, "ab STOP"))
    reqs = {f"mt{size}": ({"stop": ["STOP"], "min_tokens": k}, chunk(ids, [size]))
            for size in (1, 3, len(ids))}
    reqs["mt0"] = ({"stop": ["STOP"]}, chunk(ids, [1]))
    out = drive(ds, reqs)
    for size in (1, 3, len(ids)):
        assert "".join(d.text for d in out[f"mt{size}"]) == "ab STOP cd "
        assert out[f"mt{size}"][-1].finish == Stop("STOP")
    assert "".join(d.text for d in out["mt0"]) == "ab "


def test_bad_parser_names_end_the_request_with_a_terminal_error(ds: LocalService) -> None:
    ids = enc(DS, "hello")
    out = drive(ds, {"bad-r": ({"reasoning_parser": "r9"}, [ids]),
                     "bad-t": ({"tool_parser": "nope"}, [ids]),
                     "bad-a": ({"tool_parser": "hermes", "attribution": True}, [ids])})
    for rid, option in (("bad-r", "reasoning_parser 'r9'"), ("bad-t", "tool_parser 'nope'"),
                        ("bad-a", "attribution")):
        deltas = out[rid]
        assert len(deltas) == 1 and deltas[0].finish == ABORT, rid
        assert deltas[0].error is not None and option in deltas[0].error, deltas[0].error
    assert ds.health()[0] == 200


def test_stream_false_equals_stream_true_concatenated(ds: LocalService) -> None:
    ids = enc(DS, DS_OUTPUT)
    out = drive(ds, {"s1": (PARSED, chunk(ids, [3])),
                     "s0": ({**PARSED, "stream": False}, chunk(ids, [3]))})
    assert len(out["s0"]) == 1 and out["s0"][0].ids == ids
    assert channels(out["s0"]) == channels(out["s1"])
    assert out["s0"][0].finish == out["s1"][-1].finish


def test_abort_releases_what_the_parser_holds(ds: LocalService) -> None:
    assert ds.sched is not None and ds.front is not None
    ids = enc(DS, "<think>a</think>x <｜DSML｜tool_ca")
    ds.sched.open("ab", **PARSED)
    ds.sched.step(["ab"], [ids])
    ds.sched.abort("ab")
    ds.barrier()
    deltas = ds.front.requests["ab"].deltas
    assert channels(deltas)[:2] == ("x <｜DSML｜tool_ca", "a")
    assert deltas[-1].finish == ABORT


def test_columnar_output_carries_the_parser_fields(tmp_path: Path) -> None:
    ids = enc(DS, DS_OUTPUT)
    with LocalService(tmp_path, shards=1, args=["--output-format", "columnar"]) as svc:
        out = drive(svc, {"c1": (PARSED, chunk(ids, [1])), "c4": (PARSED, chunk(ids, [4]))})
    want = expect(DS, "x", PARSED, ids)
    for deltas in out.values():
        assert channels(deltas) == want
        assert deltas[-1].finish == Length(tool_calls=True)


def test_special_token_markers_reach_the_parser_with_skip_special(tmp_path: Path) -> None:
    info = qwen_style()
    path = tmp_path / "qwen-style.json"
    info.tokenizer.save(str(path))
    ids = enc(info, QWEN_OUTPUT)
    opts = {"reasoning_parser": "qwen3", "tool_parser": "hermes"}
    with LocalService(tmp_path, shards=1, tokenizer=str(path)) as svc:
        out = drive(svc, {"q1": (opts, chunk(ids, [1])), "q4": (opts, chunk(ids, [4])),
                          "plain": ({}, [ids])})
    for rid in ("q1", "q4"):
        assert channels(out[rid]) == expect(info, rid, opts, ids)
        assert channels(out[rid])[:3] == ("Sure.", "plan: call f",
                                          [(0, "f", '{"q": "日本語 👍🏽"}')])
    assert "<think>" not in out["plain"][0].text and "plan: call f" in out["plain"][0].text


def test_no_tokenizer_mode_sends_ids_and_usage_without_text(tmp_path: Path) -> None:
    rows = [[5, 1_000_000], [7], [2**40, 3]]
    with LocalService(tmp_path, shards=2, tokenizer="none") as svc:
        assert svc.health()[0] == 200
        out = drive(svc, {"n1": ({}, rows), "n2": ({"stream": False, "prompt_ids": [1]}, rows),
                          "n3": ({"stop": ["x"]}, rows), "n4": ({"tool_parser": "hermes"}, rows),
                          "n5": ({"logprob_text": True}, rows)},
                    Stop(3))
    for rid in ("n1", "n2"):
        deltas = out[rid]
        assert [i for d in deltas for i in d.ids] == [5, 1_000_000, 7, 2**40, 3]
        assert all(d.text == "" for d in deltas)
        last = deltas[-1]
        assert last.finish == Stop(3)
        assert last.usage is not None and last.usage.completion_tokens == 5
    assert len(out["n2"]) == 1
    for rid, option in (("n3", "stop"), ("n4", "tool_parser"), ("n5", "logprob_text")):
        (d,) = out[rid]
        assert d.error is not None and "--tokenizer none" in d.error and option in d.error
