"""SGLang's messages read by field name, never by a fixed order (issue 42): every release
0.5.12-0.5.23's layout, as read from its own classes and detokenizer source, is served; a
layout the service has never seen (a field added in the middle, one removed, renamed or
moved) is served by name or refused in one line, and a message of another release is
dropped whole, never misread. Through the real service, `--sglang-layout FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from sglang_cases import MANIFEST, SglangService, token_ids_message

from sglang_tok.config import Config, ConfigError, finalize
from sglang_tok.protocols.registry import check
from sglang_tok.protocols.sglang import layout as layouts
from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import Layout, builtin, carry_of, known, reply_kwargs
from sglang_tok.protocols.sglang.positions import Positions
from sglang_tok_testkit.sglang_side import frames

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "sglang"
RELEASES = [f"0.5.{k}" for k in range(12, 24)]
_plain = msgspec.msgpack.Decoder()


def test_every_release_with_plugin_hooks_has_a_layout_that_is_served() -> None:
    assert layouts.known_releases() == RELEASES
    for release in RELEASES:
        layout = known(release)
        assert layout.release == release and layout.refusal() is None, release
        positions = Positions(layout)
        assert positions.count == len(layout.token_ids)
        # the reply's fields come from the scheduler's fields of the same name, but the
        # texts, the placeholders SGLang always sends as None, and the base64 tensors
        for name, how in zip(layout.str_output, layout.carry):
            assert how in ("texts", "nil", "default", f"={name}", f"b64={name}"), (release, name)


def test_field_order_differs_between_releases_and_is_read_by_name() -> None:
    """0.5.20's BatchTokenIDOutput read with 0.5.23's order would put 23 of its fields
    under another name: the plans place each by its own release's name."""
    old, new = known("0.5.20"), known("0.5.23")
    misplaced = [n for i, n in enumerate(old.token_ids)
                 if i >= len(new.token_ids) or new.token_ids[i] != n]
    assert len(misplaced) >= 20
    p_old, p_new = Positions(old), Positions(new)
    for name in ("time_stats", "customized_info", "dp_ranks", "rids", "decode_ids"):
        assert old.token_ids[p_old.at[name] - 1] == name == new.token_ids[p_new.at[name] - 1]


def test_the_name_rule_agrees_with_each_releases_own_detokenizer() -> None:
    """Where a release's detokenizer source could not be read, the reply would be filled by
    name alone: on every release tested that gives what its source says, but for a field
    its detokenizer leaves at the class default (0.5.12-0.5.13's `load`)."""
    for release in RELEASES:
        layout = known(release)
        by_name = carry_of(layout.str_output, layout.token_ids, None)
        for name, source, names in zip(layout.str_output, layout.carry, by_name):
            assert source == names or (source == "default" and name in layout.defaults), \
                (release, name, source, names)


def test_the_reply_call_is_read_from_the_detokenizers_source() -> None:
    src = '''
def handle_batch_token_id_out(self, recv_obj):
    output_strs = self._decode_batch_token_id_output(recv_obj) if recv_obj.rids else []
    experts = self._b64_encode_per_request(recv_obj.routed_experts)
    return BatchStrOutput(rids=recv_obj.rids, output_strs=output_strs,
                          routed_experts=experts, placeholder_tokens_idx=None,
                          prompt_tokens=recv_obj.input_tokens,
                          odd=len(recv_obj.rids))
'''
    got = reply_kwargs(src)
    assert got == {"rids": "=rids", "output_strs": "texts", "routed_experts": "b64=routed_experts",
                   "placeholder_tokens_idx": "nil", "prompt_tokens": "=input_tokens",
                   "odd": "?len(recv_obj.rids)"}


def _variant(**changes: Any) -> Layout:
    return msgspec.structs.replace(builtin(), **changes)


def _refused(layout: Layout, tmp_path: Path) -> str:
    path = tmp_path / f"{layout.release}.json"
    path.write_bytes(layout.to_json())
    with pytest.raises(ConfigError) as err:
        checked(Config(protocol="sglang", sglang_layout=str(path),
                        runtime_dir=str(tmp_path / "rt")))
    line = str(err.value)
    assert "\n" not in line and layout.release in line and layouts.RANGE in line
    return line


def test_a_layout_without_what_the_service_reads_is_refused_in_one_line(tmp_path: Path) -> None:
    new = builtin()
    no_offsets = _variant(release="9.9.1", token_ids=tuple(
        n for n in new.token_ids if n != "read_offsets"))
    assert "read_offsets" in _refused(no_offsets, tmp_path)
    renamed = _variant(release="9.9.2", token_ids=tuple(
        "input_tokens" if n == "prompt_tokens" else n for n in new.token_ids))
    assert "prompt_tokens" in _refused(renamed, tmp_path)
    unknown = _variant(release="9.9.3", carry=tuple(
        "?len(recv_obj.rids)" if n == "dp_ranks" else c
        for n, c in zip(new.str_output, new.carry)))
    assert "dp_ranks" in _refused(unknown, tmp_path)
    assert checked(Config(protocol="sglang", sglang_layout="0.5.14",
                           runtime_dir=str(tmp_path / "ok"))).sglang_layout == "0.5.14"


# --------------------------------------------------------------------------- unseen layouts
def _moved(names: tuple[str, ...], name: str, after: str) -> tuple[str, ...]:
    rest = [n for n in names if n != name]
    at = rest.index(after) + 1
    return (*rest[:at], name, *rest[at:])


def _with(names: tuple[str, ...], new: str, after: str) -> tuple[str, ...]:
    at = names.index(after) + 1
    return (*names[:at], new, *names[at:])


NEW = builtin()
# a field added in the middle (per row, carried to the reply by name), a field SGLang's
# detokenizer sends on renamed, one removed, and one moved from the end to the front
UNSEEN = _variant(
    release="0.6.0",
    token_ids=_moved(_with(tuple("dp_rank_ids" if n == "dp_ranks" else n for n in NEW.token_ids
                                 if n != "cached_tokens_details"),
                           "novel_column", "read_offsets"), "time_stats", "rids"),
    str_output=_with(tuple("dp_rank_ids" if n == "dp_ranks" else n for n in NEW.str_output
                           if n != "cached_tokens_details"), "novel_column", "output_ids"),
    carry=_with(tuple("=dp_rank_ids" if c == "=dp_ranks" else c
                      for n, c in zip(NEW.str_output, NEW.carry) if n != "cached_tokens_details"),
                "=novel_column", "=output_ids"))
RENAMED = {"dp_ranks": "dp_rank_ids"}


def _as(layout: Layout, msg: bytes, old: Layout, novel: bool) -> bytes:
    """A message of `old` written in `layout`'s order, fields by name (the renamed one
    under its new name, a new per-row column of each row's rid, a removed one gone)."""
    fields = wire.fields_decoder.decode(msg)
    by_name = dict(zip(old.token_ids, fields[1:]))
    by_name = {RENAMED.get(k, k): v for k, v in by_name.items()}
    if novel:
        rids = _plain.decode(by_name["rids"])
        by_name["novel_column"] = msgspec.Raw(msgspec.msgpack.encode(
            [f"novel-{r}" for r in rids] if rids else None))
    return wire.encode_message("BatchTokenIDOutput", [by_name[n] for n in layout.token_ids])


@pytest.fixture(scope="module", params=[1, 2], ids=["1shard", "2shards"])
def unseen_service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("unseen")
    path = tmp / "layout.json"
    path.write_bytes(UNSEEN.to_json())
    with SglangService(tmp, request.param, ["--sglang-layout", str(path)], UNSEEN) as s:
        yield s


@pytest.mark.parametrize("case", ["plain", "logprobs", "http_workers", "stops"])
def test_an_unseen_layout_is_served_by_name(unseen_service: SglangService, case: str) -> None:
    s = unseen_service
    spec = MANIFEST["cases"][case]
    msgs, ref = s.case(case)
    s.side.clear()
    for msg in msgs:
        s.send(_as(UNSEEN, msg, NEW, novel=True))
    assert s.side.wait(spec["exact"], timeout=30), s.svc.logs()
    for rid, exact in spec["exact"].items():
        assert s.side.text(rid) == exact, rid
        got_rows = s.side.rows[rid]
        assert len(got_rows) == len(ref[rid]), rid
        for got, want in zip(got_rows, ref[rid]):
            assert got.pop("novel_column") == f"novel-{rid}"
            got["dp_ranks"] = got.pop("dp_rank_ids")
            want.pop("cached_tokens_details")
            del got["output_strs"], want["output_strs"]
            assert got == want, rid


def test_a_message_of_another_release_is_dropped_whole_never_misread(
        unseen_service: SglangService) -> None:
    s = unseen_service
    rids = ["other-0", "other-1"]
    s.side.clear()
    # 0.5.23's order: 53 fields where this release has 54
    s.send(token_ids_message([{"rid": rid, "ids": [19923, 14]} for rid in rids]))
    assert s.side.wait(rids, timeout=15)
    for rid in rids:
        (row,) = s.side.rows[rid]
        assert row["finished_reasons"]["type"] == "abort", row
        assert row["output_strs"] == ""


def test_each_release_reads_only_its_own_messages() -> None:
    for release in RELEASES:
        positions = Positions(known(release))
        for msg in frames(GOLDEN / "plain.in.bin"):
            fields = wire.fields_decoder.decode(msg)
            assert (len(fields) - 1 == positions.count) == (
                len(known(release).token_ids) == len(NEW.token_ids)), release


def checked(cfg: Config) -> Config:
    """A Config as `sglang-tok serve` takes it: finalized, then the protocol's own check."""
    cfg = finalize(cfg)
    check(cfg)
    return cfg


# the three forms `DetokenizerManager.trim_matched_stop` took in 0.5.12-0.5.23 (its head)
TRIM_0_5_12 = '''
    def trim_matched_stop(self, output, finished_reason, no_stop_trim):
        if no_stop_trim or not finished_reason:
            return output
        matched = finished_reason.get("matched", None)
        if not matched:
            return output
'''
TRIM_0_5_14 = TRIM_0_5_12.replace("if no_stop_trim or not finished_reason:",
                                  "if not finished_reason:") + '''
        if isinstance(matched, str) and isinstance(output, str):
            pos = output.find(matched)
            end = pos + len(matched)
            return output[:end] if no_stop_trim else output[:pos]
'''
TRIM_0_5_21 = TRIM_0_5_14.replace("if not matched:", "if matched is None:")


def test_each_releases_trim_rules_are_read_from_its_source() -> None:
    """With no_stop_trim 0.5.12-0.5.13 keep the whole text, 0.5.14 on cut after the stop
    string; a stop id 0 is trimmed from 0.5.21 on: read from the release's own source, and
    each stored layout says the same. A form never seen is refused, not guessed."""
    assert layouts.trim_rules(TRIM_0_5_12) == ("whole", False)
    assert layouts.trim_rules(TRIM_0_5_14) == ("through", False)
    assert layouts.trim_rules(TRIM_0_5_21) == ("through", True)
    assert layouts.trim_rules("def trim_matched_stop(self, output): return output")[0] == "?"
    for release in layouts.known_releases():
        got = known(release)
        key = layouts.release_key(release)
        assert got.kept_stop_str == ("whole" if key < (0, 5, 14) else "through"), release
        assert got.stop_id_zero_trimmed == (key >= (0, 5, 21)), release
    odd = msgspec.structs.replace(builtin(), kept_stop_str="?")
    refusal = odd.refusal()
    assert refusal is not None and "\n" not in refusal and "trims a kept stop string" in refusal


def test_a_stop_id_zero_is_kept_where_the_release_keeps_it() -> None:
    """Before 0.5.21 `if not matched` left a matched stop id 0 in the text: the shard is
    handed a finish that trims nothing there, and the id trimmed from 0.5.21 on."""
    from sglang_tok.finish import Stop
    from sglang_tok.protocols.sglang.reader import SglangReader
    from sglang_tok.protocols.sglang.workers import WorkerMap

    old = SglangReader(Positions(known("0.5.20")), 512, 4096, frozenset(), WorkerMap())
    new = SglangReader(Positions(known("0.5.21")), 512, 4096, frozenset(), WorkerMap())
    assert old._for_shard(Stop(0)) == Stop() and new._for_shard(Stop(0)) == Stop(0)
    assert old._for_shard(Stop(5)) == Stop(5)
    assert old.through and not SglangReader(Positions(known("0.5.13")), 512, 4096, frozenset(),
                                            WorkerMap()).through
