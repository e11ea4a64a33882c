"""Schema checks of the ported peer parser cases (tests/parsers/parser_cases/*.json).

Only the data is validated here; replaying the cases through our parsers is another test's job."""

from __future__ import annotations

import pytest
from parser_cases_load import all_parsers, load_cases

PARSERS = all_parsers()


def test_corpus_is_not_empty():
    assert PARSERS
    assert sum(len(load_cases(p)) for p in PARSERS) > 0


def test_ids_are_unique_across_files():
    seen: dict[str, str] = {}
    for p in PARSERS:
        for case in load_cases(p):
            assert case["id"] not in seen, f"{case['id']} in {p} and {seen.get(case['id'])}"
            seen[case["id"]] = p


def _check_calls(cid, calls):
    assert isinstance(calls, list), cid
    for call in calls:
        assert isinstance(call, dict), cid
        if "name" in call:
            assert call["name"] is None or isinstance(call["name"], str), cid
        if "arguments" in call and call["arguments"] is not None:
            assert isinstance(call["arguments"], dict), f"{cid}: arguments must be a JSON object"
        if call.get("arguments", 0) is None:
            assert isinstance(call.get("arguments_raw"), str), f"{cid}: null arguments need arguments_raw"


@pytest.mark.parametrize("parser", PARSERS)
def test_case_schema(parser):
    for case in load_cases(parser):
        cid = case.get("id")
        assert isinstance(cid, str) and cid, case
        for key in ("source", "text", "expect"):
            assert key in case, f"{cid}: missing {key}"
        assert isinstance(case["source"], str) and case["source"], cid
        assert isinstance(case["text"], str), cid
        assert isinstance(case["expect"], dict), cid
        assert set(case["expect"]) <= {"content", "reasoning", "calls", "calls_count"}, cid
        for key in ("content", "reasoning"):
            if key in case["expect"]:
                assert isinstance(case["expect"][key], str), cid
        if "calls" in case["expect"]:
            _check_calls(cid, case["expect"]["calls"])
        if "peer_actual" in case and "calls" in case["peer_actual"]:
            _check_calls(cid, case["peer_actual"]["calls"])
        tools = case.get("tools")
        assert tools is None or isinstance(tools, list), cid
        assert isinstance(case.get("reasoning_parser", ""), str), cid
        assert isinstance(case.get("reasoning_started", False), bool), cid
        if parser.startswith("reasoning-"):
            assert case.get("reasoning_parser"), f"{cid}: a reasoning file's case names its parser"
        if "chunks" in case:
            assert isinstance(case["chunks"], list) and all(isinstance(c, str) for c in case["chunks"]), cid
            assert "".join(case["chunks"]) == case["text"], f"{cid}: chunks must join to text"
        if "partial" in case:
            assert isinstance(case["partial"], list), cid
