"""The stand-in's messages built by field name for every SGLang release 0.5.12-0.5.23,
without SGLang: the columns the stand-in makes (`step_columns.COLUMNS`) mapped onto each release's
`BatchTokenIDOutput` fields as its layout names them (`protocols/sglang/layouts/*.json`),
with what a release requires that the stand-in does not make filled as that release's
scheduler fills it, and anything else refused in one line.

Each golden case is stepped through the stand-in once; every step's columns are built as
0.5.23's message and as each other release's, and each field of the other release holds,
by name, what the same field of 0.5.23's holds (or its fill). Pickle-IPC releases
(0.5.12-0.5.14) are built as a dataclass of the layout's fields, every one required: a
field the field_map does not give, or one the class does not have, fails the build.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Any

import msgspec
import pytest
from test_standin_rows import (
    EOS,
    NAMES,
    TOKENIZER,
    Scripted,
    ask_of,
    decode,
    fields,
    ids_of,
    message,
    scripts,
)

from sglang_tok_standin.core import Core, wire_beams
from sglang_tok_standin.release_message import (
    FILLS,
    LAST_TESTED,
    FieldMap,
    encode,
    fields_of,
    known_fields,
    known_releases,
)
from sglang_tok_standin.step_columns import COLUMNS

RELEASES = known_releases()
_plain = msgspec.msgpack.Decoder(ext_hook=lambda code, data: (code, bytes(data)))


def test_the_layouts_of_every_release_are_here() -> None:
    assert RELEASES[0] == "0.5.12" and RELEASES[-1] == LAST_TESTED and len(RELEASES) == 12
    counts = {r: len(known_fields(r).token_ids) for r in RELEASES}
    assert counts["0.5.12"] == counts["0.5.13"] == 42 and counts["0.5.16"] == 49
    assert counts["0.5.20"] == 54 and counts["0.5.23"] == 53


@pytest.mark.parametrize("release", RELEASES)
def test_every_field_of_every_release_is_made_or_filled(release: str) -> None:
    """Every field, as if each were required (no class at hand to say which have
    defaults), is one of the stand-in's columns or a known fill."""
    names = known_fields(release).token_ids
    field_map = FieldMap(release, names, None)
    assert field_map.refusal() is None and field_map.missing == ()
    assert [n for n, _ in field_map.taken] == [n for n in names if n in COLUMNS]
    assert {n for n, _ in field_map.filled} == {n for n in names if n not in COLUMNS}
    assert {n for n, _ in field_map.filled} <= set(FILLS)
    assert field_map.dropped == tuple(n for n in COLUMNS if n not in names)
    if release in ("0.5.12", "0.5.13"):
        assert {"load", "token_steps"} == {n for n, _ in field_map.filled}
        # the columns 0.5.12 has no field for: newer counts, beam search, weight versions
        assert {"image_tokens", "beam_search_output", "weight_versions",
                "spec_num_cap_tokens"} <= set(field_map.dropped)


def golden_steps(case: str) -> list[dict[str, Any]]:
    """The stand-in's columns, step by step, for a golden case's requests."""
    golden, by_rid = scripts(case)
    core = Core(Scripted(by_rid), decode, EOS, TOKENIZER.get_vocab_size(), wire_beams)
    aborts = {s.finish_at: s for s in by_rid.values()
              if s.finish and s.finish["type"] == "abort"}
    out = []
    for k in range(len(golden)):
        for s in by_rid.values():
            if s.first == k:
                core.add(ask_of(s))
        if k in aborts:
            req = next(r for r in core.running if r.rid == aborts[k].rid)
            req.to_finish = aborts[k].finish
        cols = core.step()
        assert cols is not None
        out.append(cols)
    return out


def dataclass_of(release: str) -> type:
    """A pickle-IPC release's class as a dataclass of its layout's fields, in order,
    every one required."""
    return dataclasses.make_dataclass("BatchTokenIDOutput",
                                      [(n, Any) for n in known_fields(release).token_ids])


@pytest.mark.parametrize("case", ["logprobs", "stops", "random"])
@pytest.mark.parametrize("release", [r for r in RELEASES if r != LAST_TESTED])
def test_each_release_gets_the_same_fields_by_name(release: str, case: str) -> None:
    layout = known_fields(release)
    field_map = FieldMap(release, layout.token_ids, None)
    filled = {n for n, _ in field_map.filled}
    for k, cols in enumerate(golden_steps(case)):
        newest = fields(message(cols))
        kwargs = field_map.kwargs(cols)
        if layout.ipc == "pickle":  # built as the release's own (data)class, by name
            obj = dataclass_of(release)(**kwargs)
            assert obj.rids == cols["rids"] and obj.output_ids == cols["output_ids"]
            assert obj.spec_verify_ct == [] and obj.spec_correct_drafts_histogram == []
            got = fields(encode(kwargs, layout.token_ids), layout.token_ids)
        else:
            got = fields(message(cols, field_map), layout.token_ids)
        for name in layout.token_ids:
            if name in filled:
                assert got[name] is None, (k, name)  # load, token_steps, sampling logprobs
            else:
                assert got[name] == newest[name], (k, name)


def test_a_release_whose_ids_are_lists() -> None:
    """0.5.12's scheduler keeps ids in lists (0.5.13 on: `array`s): the process converts
    them by name (`convert`), the rest as they are."""
    def as_lists(rows: list[Any]) -> list[list[int]]:
        return [list(r) for r in rows]

    layout = known_fields("0.5.12")
    field_map = FieldMap("0.5.12", layout.token_ids, None,
                convert={"decode_ids": as_lists, "output_ids": as_lists})
    cols = golden_steps("plain")[0]
    obj = dataclass_of("0.5.12")(**field_map.kwargs(cols))
    assert all(type(r) is list for r in (*obj.decode_ids, *obj.output_ids))
    assert obj.output_ids == [list(r) for r in cols["output_ids"]]
    assert [ids_of(x) for x in fields(message(cols))["output_ids"]] == obj.output_ids


def with_field(names: tuple[str, ...], at: int, name: str) -> tuple[str, ...]:
    return (*names[:at], name, *names[at:])


def test_a_required_field_the_stand_in_does_not_make_is_refused_in_one_line() -> None:
    names = with_field(NAMES, 10, "draft_token_ids")
    field_map = FieldMap("0.6.0", names, None)
    refusal = field_map.refusal()
    assert refusal is not None and "\n" not in refusal
    assert "SGLang 0.6.0" in refusal and "draft_token_ids" in refusal
    # with a default, it is left at its default: SGLang's encoder writes it
    required = set(names) - {"draft_token_ids"}
    field_map = FieldMap("0.6.0", names, required)
    assert field_map.refusal() is None and field_map.defaulted == ("draft_token_ids",)
    cols = golden_steps("plain")[0]
    assert "draft_token_ids" not in field_map.kwargs(cols)
    got = fields(encode(field_map.kwargs(cols), names), names)
    assert got["draft_token_ids"] is None and got["rids"] == cols["rids"]
    # a renamed column the release requires: refused, never sent under another name
    renamed = tuple("request_ids" if n == "rids" else n for n in NAMES)
    refusal = FieldMap("0.6.0", renamed, None).refusal()
    assert refusal is not None and "request_ids" in refusal


def test_a_field_moved_or_removed_is_placed_by_name() -> None:
    moved = (*[n for n in NAMES if n != "output_ids"], "output_ids")
    removed = tuple(n for n in NAMES if n != "cached_tokens_details")
    cols = golden_steps("multi_id_rows")[2]
    newest = fields(message(cols))
    for names in (moved, removed):
        field_map = FieldMap("0.6.0", names, None)
        assert field_map.refusal() is None
        got = fields(encode(field_map.kwargs(cols), names), names)
        assert all(got[n] == newest[n] for n in names)


def test_a_fill_of_the_process_replaces_the_default_one() -> None:
    """`load` (0.5.12-0.5.13) is the scheduler's loads where the process can build them
    with the release's own class; nil otherwise."""
    layout = known_fields("0.5.13")
    field_map = FieldMap("0.5.13", layout.token_ids, None,
                fills={"load": lambda cols: {"num_running_reqs": len(cols["rids"])}})
    cols = golden_steps("random")[5]
    assert field_map.kwargs(cols)["load"] == {"num_running_reqs": len(cols["rids"])}


def test_fields_read_from_a_layout_in_any_form() -> None:
    from sglang_tok.protocols.sglang.layout import known

    full = known("0.5.16")
    for form in (full.to_json(), full.to_json().decode(), msgspec.to_builtins(full)):
        got = fields_of(form)
        assert got.release == "0.5.16" and got.ipc == "msgpack"
        assert got.token_ids == full.token_ids
    assert fields_of({"token_ids": ["rids"], "more": 1}).release == "unknown"


# --------------------------------------------------------------------------- the launcher
def run_scheduler_process_0_5_20(server_args: Any, port_args: Any, gpu_id: int,
                                 tp_rank: int, attn_cp_rank: int, moe_dp_rank: int,
                                 moe_ep_rank: int, pp_rank: int, dp_rank: int | None,
                                 pipe_writer: Any, display_tp_rank: int | None = None,
                                 display_dp_rank: int | None = None,
                                 display_moe_ep_rank: int | None = None) -> None: ...


def run_scheduler_process_0_5_23(server_args: Any, port_args: Any, gpu_id: int,
                                 tp_rank: int, pp_rank: int, dp_rank: int | None,
                                 pipe_writer: Any, display_tp_rank: int | None = None,
                                 display_dp_rank: int | None = None,
                                 display_moe_ep_rank: int | None = None) -> None: ...


class Pipe:
    def send(self, obj: Any) -> None: ...


def test_the_launchers_arguments_are_bound_by_the_releases_names() -> None:
    """0.5.12-0.5.20 pass ten arguments (with the attention-CP and MoE ranks), 0.5.21 on
    seven: the stand-in takes each by the name its release gives it."""
    import functools

    from sglang_tok_standin.main import StandinRefused, _bind
    from sglang_tok_standin.plugin import params_of

    pipe = Pipe()
    old = params_of(run_scheduler_process_0_5_20)
    new = params_of(run_scheduler_process_0_5_23)
    bound = _bind(old, ("sa", "pa", 3, 1, 0, 0, 0, 2, None, pipe), {})
    assert (bound["gpu_id"], bound["tp_rank"], bound["pp_rank"]) == (3, 1, 2)
    assert bound["pipe_writer"] is pipe and bound["dp_rank"] is None
    bound = _bind(new, ("sa", "pa", 3, 1, 2, 5, pipe), {})
    assert (bound["pp_rank"], bound["dp_rank"], bound["pipe_writer"]) == (2, 5, pipe)
    # a process function given as a partial: its own arguments come first
    assert params_of(functools.partial(run_scheduler_process_0_5_23, "sa")) == new[1:]
    # no names at hand: settings and ports first, the pipe last
    assert _bind((), ("sa", "pa", 0, 0, 0, None, pipe), {})["pipe_writer"] is pipe
    with pytest.raises(StandinRefused, match="passes 11 arguments"):  # more than it takes
        _bind(new, ("sa", "pa", 3, 1, 0, 0, 0, 2, None, pipe, 0), {})


def test_a_class_s_fields_and_those_it_requires() -> None:
    from sglang_tok_standin.main import _keeps_lists, class_fields

    class Struct(msgspec.Struct, kw_only=True):
        rids: list[str]
        decode_ids: list[array]  # type: ignore[type-arg]
        load: Any = None

    @dataclasses.dataclass
    class Old:
        spec_verify_ct: list[int]
        decode_ids: list[int]
        time_stats: list[Any] | None = None
        extra: list[int] = dataclasses.field(default_factory=list)

    assert class_fields(Struct) == (("rids", "decode_ids", "load"),
                                    frozenset({"rids", "decode_ids"}))
    assert class_fields(Old) == (("spec_verify_ct", "decode_ids", "time_stats", "extra"),
                                 frozenset({"spec_verify_ct", "decode_ids"}))
    assert _keeps_lists(Old, "decode_ids") and not _keeps_lists(Struct, "decode_ids")
