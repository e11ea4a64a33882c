"""The version matrix (`scripts/sglang/matrix.py`): its comparison and table without SGLang
(each release's stop trimming, what of a reply must equal stock's, texts against the
ledger, a row served or not), and, with SGLANG_PYTHON, a short real run of two releases
(SGLANG_MATRIX_RELEASES, default 0.5.16,0.5.23; each laid out beforehand, nothing is
downloaded), one server at a time, every one stopped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest
from sglang_cases import sglang_python

from sglang_tok_standin.ledger import Entry, Ledger, dumps, expected_beams, expected_text
from sglang_tok_testkit import matrix_compare as mc
from sglang_tok_testkit import releases

STOP_STR = {"type": "stop", "matched": "cd"}


def decode(ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    """id i is the letter i (a..z); id 0 is 'a' and, as a special token, skipped."""
    return "".join(chr(97 + i % 26) for i in ids if not (skip_special_tokens and i == 0))


# --------------------------------------------------------------------------- stop trimming
def test_a_stop_string_is_cut_before_it_or_kept_through_it() -> None:
    e = Entry("r", [1, 2, 3, 4], STOP_STR)  # "bcde": the stop "cd" at 1
    assert expected_text(e, decode, "0.5.23") == "b"
    kept = Entry("r", [1, 2, 3, 4], STOP_STR, no_stop_trim=True)
    assert expected_text(kept, decode, "0.5.14") == "bcd"
    assert expected_text(kept, decode, "0.5.23") == "bcd"


def test_0_5_12_and_0_5_13_keep_all_the_text_under_no_stop_trim() -> None:
    kept = Entry("r", [1, 2, 3, 4], STOP_STR, no_stop_trim=True)
    assert expected_text(kept, decode, "0.5.12") == "bcde"
    assert expected_text(kept, decode, "0.5.13") == "bcde"


def test_a_stop_id_is_trimmed_and_stop_id_0_only_from_0_5_21() -> None:
    e = Entry("r", [1, 2, 5], {"type": "stop", "matched": 5})
    assert expected_text(e, decode, "0.5.12") == "bc"
    assert expected_text(Entry("r", [1, 2, 5], {"type": "stop", "matched": 5},
                               no_stop_trim=True), decode) == "bcf"
    zero = Entry("r", [1, 2, 0], {"type": "stop", "matched": 0}, skip_special_tokens=False)
    assert expected_text(zero, decode, "0.5.20") == "bca"
    assert expected_text(zero, decode, "0.5.21") == "bc"


def test_a_length_finish_is_never_trimmed() -> None:
    assert expected_text(Entry("r", [1, 2, 5], {"type": "length", "length": 3}),
                         decode) == "bcf"


def test_beams_decode_each_sequence_only_the_best_ends_as_the_group() -> None:
    e = Entry("r", [0, 0], {"type": "stop", "matched": 5}, beams=[[1, 5], [1, 2]])
    assert expected_beams(e, decode) == ["b", "bc"]


def test_the_ledger_is_read_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    assert ledger.new() == []
    path.write_text(dumps(Entry("a", [1])) + "\n" + dumps(Entry("b", [2]))[:5])
    assert [e.rid for e in ledger.new()] == ["a"]
    path.write_text(dumps(Entry("a", [1])) + "\n" + dumps(Entry("b", [2])) + "\n")
    assert [e.rid for e in ledger.new()] == ["b"]
    assert set(ledger.entries()) == {"a", "b"}


# --------------------------------------------------------------------------- replies
def _meta(rid: str, **more: object) -> dict[str, object]:
    return {"id": rid, "finish_reason": {"type": "length", "length": 2}, "e2e_latency": 0.1,
            "response_sent_to_client_ts": 17.0, "completion_tokens": 2, **more}


def test_ids_and_timings_are_dropped_the_rest_compared() -> None:
    stock = {"text": "bc", "meta_info": _meta("x", queue_time=1.0), "chunks": 4}
    plugin = {"text": "bc", "meta_info": _meta("y", queue_time=2.0), "chunks": 7}
    assert mc.first_difference(mc.normalized(stock), mc.normalized(plugin)) is None
    plugin["meta_info"]["completion_tokens"] = 3  # type: ignore[index]
    diff = mc.first_difference(mc.normalized(stock), mc.normalized(plugin))
    assert diff == "meta_info.completion_tokens: 2 != 3"
    plugin["meta_info"]["completion_tokens"] = 2  # type: ignore[index]
    del plugin["meta_info"]["finish_reason"]  # type: ignore[attr-defined]
    diff = mc.first_difference(mc.normalized(stock), mc.normalized(plugin))
    assert diff == "meta_info.finish_reason: only stock's reply has it"
    assert mc.first_difference([1, 2], [1]) == ": 2 items != 1"


def test_generate_texts_against_the_ledger_by_rid_beams_too() -> None:
    entries = [Entry("a", [1, 2]), Entry("b", [3, 4]),
               Entry("c", [0, 0], {"type": "length", "length": 2}, beams=[[1, 2], [1, 3]])]
    reply = [{"text": "bc", "meta_info": _meta("a")}, {"text": "de", "meta_info": _meta("b")}]
    got = mc.generate_texts(reply, entries, decode, "0.5.23")
    assert (got.checked, got.exact) == (2, 2)
    wrong = mc.generate_texts({"text": "bd", "meta_info": _meta("a")}, entries, decode,
                              "0.5.23")
    assert (wrong.checked, wrong.exact) == (1, 0) and "'bd' != 'bc'" in wrong.wrong[0]
    beams = {"text": "bc", "meta_info": _meta("c", beam_results=[
        {"text": "bc"}, {"text": "bX"}])}
    got = mc.generate_texts(beams, entries, decode, "0.5.23")
    assert (got.checked, got.exact) == (3, 2)  # beam 1 wrong; the top text is beam 0's
    lost = mc.generate_texts({"text": "bc", "meta_info": _meta("zzz")}, entries, decode,
                             "0.5.23")
    assert lost.exact == 0 and "no ledger entry" in lost.wrong[0]


def test_chat_choices_each_match_a_distinct_entry() -> None:
    entries = [Entry("p", []), Entry("a", [1, 2]), Entry("b", [1, 2])]
    reply = {"choices": [{"content": "bc"}, {"content": "bc"}]}
    got = mc.chat_texts(reply, entries, decode, "0.5.23")
    assert (got.checked, got.exact) == (2, 2)
    twice = mc.chat_texts({"choices": [{"content": "bc"}] * 3}, entries, decode, "0.5.23")
    assert (twice.checked, twice.exact) == (3, 2)


def test_beam_search_probes_only_where_the_release_has_it() -> None:
    assert not any(p.beam for p in mc.probes(False))
    assert any(p.beam for p in mc.probes(True))
    names = [p.name for p in mc.PROBES]
    assert len(set(names)) == len(names)
    routes = {p.route for p in mc.PROBES}
    assert routes == {"generate", "chat"}


# --------------------------------------------------------------------------- rows, table
def _side(replies: dict[str, object], exact: int = 2, checked: int = 2) -> mc.Side:
    return mc.Side(started=True, replies=replies,
                   texts=mc.Texts(checked, exact, ["x"] * (checked - exact)))


def test_a_row_is_served_only_when_every_reply_equals_stocks_and_every_text_is_exact() -> None:
    same = {"plain": {"text": "bc"}, "n2": [{"text": "d"}]}
    row = mc.compare(mc.Row("0.5.16", _side(same), _side(dict(same))))
    assert row.served and (row.fields_equal, row.probes) == (2, 2)
    other = mc.compare(mc.Row("0.5.17", _side(same), _side({**same, "n2": [{"text": "e"}]})))
    assert not other.served and other.fields_equal == 1
    assert other.notes == ["n2: 0.text: 'd' != 'e'"]
    inexact = mc.compare(mc.Row("0.5.18", _side(same), _side(dict(same), exact=1)))
    assert not inexact.served and "plugin x" in inexact.notes
    refused = mc.compare(mc.Row("0.5.11", _side(same), mc.Side(
        refusal="sglang_tok: sglang-tok does not serve SGLang 0.5.11: ...")))
    assert refused.refused and not refused.served and refused.probes == 0
    text = mc.table([row, other, inexact, refused])
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["release", "started"] and len(lines) == 5
    assert lines[1].split()[:6] == ["0.5.16", "yes/yes", "2/2", "2/2", "2/2", "yes"]
    assert lines[2].split()[4:6] == ["1/2", "NO"] and "n2: 0.text" in lines[2]
    assert lines[4].split()[:2] == ["0.5.11", "yes/refused"]
    assert lines[4].endswith("does not serve SGLang 0.5.11: ...")


def test_releases_are_parsed_as_lists_and_spans() -> None:
    assert releases.parse_releases("all") == releases.releases()
    assert releases.parse_releases("0.5.12-0.5.14,0.5.23,0.5.13") == [
        "0.5.12", "0.5.13", "0.5.14", "0.5.23"]


# --------------------------------------------------------------------------- a real run
PYTHON = sglang_python()
REAL = [r for r in os.environ.get("SGLANG_MATRIX_RELEASES", "0.5.16,0.5.23").split(",") if r]


@pytest.mark.skipif(PYTHON is None, reason="SGLANG_PYTHON unset or unusable")
@pytest.mark.timeout(300 * len(REAL))
@pytest.mark.parametrize("release", REAL)
def test_a_release_served_by_the_plugin_as_by_stock(release: str, tmp_path: Path) -> None:
    from sglang_tok_testkit.matrix import run_release

    assert PYTHON is not None
    sites = os.environ.get("SGLANG_RELEASE_SITES", releases.DEFAULT_SITES)
    if releases.site_path(release, PYTHON, sites) is None:
        pytest.skip(f"SGLang {release} is not laid out ({sites})")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    row = run_release(release, PYTHON, tmp_path, sites=sites, lay_out=False)
    assert row.served, mc.table([row]) + "\n" + "\n".join(row.notes)
    assert row.plugin.texts.checked >= len(mc.probes(False))
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not left, left


def test_the_ledger_reads_every_dp_ranks_file(tmp_path: Path) -> None:
    """With --dp-size 2 rank 1's stand-in writes PATH.dp1 beside rank 0's PATH: both are
    the run's ledger."""
    path = tmp_path / "ledger.jsonl"
    one = {"rid": "a", "ids": [5], "finish": {"type": "length", "length": 1}}
    two = {**one, "rid": "b"}
    path.write_text(dumps(Entry(**one)) + "\n")
    (tmp_path / "ledger.jsonl.dp1").write_text(dumps(Entry(**two)) + "\n")
    ledger = Ledger(path)
    assert sorted(ledger.entries()) == ["a", "b"]
    assert sorted(e.rid for e in ledger.new()) == ["a", "b"] and ledger.new() == []
