"""Record and replay across SGLang releases, without SGLang: a trace holds the recording
release's messages and its layout (`sglang_layout` in its metadata; none: 0.5.23's); the
stand-in reads each message by that release's field names (msgpack by their order, a
pickle by the names its object carries) and replays the streams into any release,
building that release's own message by name; what it cannot replay it says in one line.

The traces here are the golden scheduler messages (SGLang 0.5.23's), rewritten by name in
another release's form: the fields that release lacks left out, the ones it has that
0.5.23 lacks nil, 0.5.12-0.5.14's as pickles of a dataclass of its fields.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import types
from array import array
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sglang_cases import GOLDEN
from test_record_replay import golden_streams
from test_standin_rows import EOS, NAMES, TOKENIZER, fields, ids_of

from sglang_tok.protocols.sglang.layout import known
from sglang_tok.tracefile import Recorder
from sglang_tok_standin.core import Core, wire_beams
from sglang_tok_standin.release_message import FieldMap, encode, known_fields
from sglang_tok_standin.requests import Ask, Sampling
from sglang_tok_standin.streams import Replayed
from sglang_tok_standin.trace_reader import ReplayRefused, read_trace, recordings, replay_refusal
from sglang_tok_testkit.sglang_side import frames

_ext = msgspec.msgpack.Decoder(ext_hook=lambda code, data: msgspec.msgpack.Ext(code,
                                                                              bytes(data)))
IO_STRUCT = "sglang.srt.managers.io_struct"


def golden_by_name(case: str) -> list[dict[str, Any]]:
    return [dict(zip(NAMES, _ext.decode(m)[1:])) for m in frames(GOLDEN / f"{case}.in.bin")]


def as_ids(value: Any) -> Any:
    return array("q", ids_of((value.code, value.data))) if isinstance(
        value, msgspec.msgpack.Ext) else value


@pytest.fixture
def sglang_modules(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module named as SGLang's io_struct (and its parents), for pickles that name
    SGLang's classes; gone after the test."""
    for name in ("sglang", "sglang.srt", "sglang.srt.managers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    mod = types.ModuleType(IO_STRUCT)
    monkeypatch.setitem(sys.modules, IO_STRUCT, mod)
    return mod


def pickled_release(mod: types.ModuleType, release: str) -> type:
    """The release's BatchTokenIDOutput as a dataclass in the fake io_struct (and a time
    stats class of SGLang's), as its scheduler pickles them."""
    cls = dataclasses.make_dataclass("BatchTokenIDOutput",
                                     [(n, Any, None) for n in known_fields(release).token_ids])
    cls.__module__ = mod.__name__
    mod.BatchTokenIDOutput = cls  # type: ignore[attr-defined]

    class SchedulerReqTimeStats:
        def __init__(self) -> None:
            self.wait_queue_entry_time = 1.5

    SchedulerReqTimeStats.__module__ = mod.__name__
    SchedulerReqTimeStats.__qualname__ = "SchedulerReqTimeStats"
    mod.SchedulerReqTimeStats = SchedulerReqTimeStats  # type: ignore[attr-defined]
    return cls


def write_trace(path: Path, release: str | None, case: str,
                module: types.ModuleType | None = None, meta: dict[str, Any] | None = None,
                extra: list[bytes] = ()) -> Path:  # type: ignore[assignment]
    """The golden case as `release` sends it (None: as recorded, 0.5.23, no layout)."""
    head: dict[str, Any] = {"protocol": "sglang", "t0": 0.0, **(meta or {})}
    if release is not None and "sglang_layout" not in head:
        head["sglang_layout"] = msgspec.to_builtins(known(release))
    rec = Recorder(path, head)
    names = known_fields(release).token_ids if release else NAMES
    for k, by_name in enumerate(golden_by_name(case)):
        if module is not None:  # a pickle-IPC release: its dataclass, ids as arrays
            cls = pickled_release(module, release or "")
            kwargs = {n: by_name.get(n) for n in names}
            kwargs["output_ids"] = [as_ids(v) for v in by_name["output_ids"]]
            kwargs["decode_ids"] = [as_ids(v) for v in by_name["decode_ids"]]
            kwargs["time_stats"] = [module.SchedulerReqTimeStats()  # type: ignore[attr-defined]
                                    for _ in by_name["rids"]]
            frame = pickle.dumps(cls(**kwargs), pickle.HIGHEST_PROTOCOL)
        else:
            frame = encode(by_name, names)
        rec.write(float(k), frame)
    for frame in extra:
        rec.write(99.0, frame)
    rec.close()
    return path


def replay(recorded: list[Any], release: str) -> dict[str, list[int]]:
    """The recorded streams replayed into `release`: its message built by name each step
    (a dataclass of its fields for a pickle release), the ids read back by rid."""
    layout = known_fields(release)
    field_map = FieldMap(release, layout.token_ids, None)
    core = Core(Replayed(recorded), None, EOS, TOKENIZER.get_vocab_size(), wire_beams)
    for k in range(len(recorded)):
        core.add(Ask(rid=f"new-{k}", input_ids=(5, 6), sampling=Sampling(
            max_new_tokens=1 << 20, ignore_eos=True)))
    out: dict[str, list[int]] = {}
    while core.busy:
        cols = core.step()
        if cols is None:
            continue
        kwargs = field_map.kwargs(cols)
        if layout.ipc == "pickle":
            obj = dataclasses.make_dataclass(
                "BatchTokenIDOutput", [(n, Any) for n in layout.token_ids])(**kwargs)
            rows = zip(obj.rids, obj.output_ids)
        else:
            got = fields(encode(kwargs, layout.token_ids), layout.token_ids)
            rows = zip(got["rids"], map(ids_of, got["output_ids"]))
        for rid, ids in rows:
            out.setdefault(rid, []).extend(ids)
    return out


@pytest.mark.parametrize("recorded_on", [None, "0.5.15", "0.5.16", "0.5.19", "0.5.21"])
def test_a_trace_is_read_by_its_release_fields(tmp_path: Path, recorded_on: str | None) -> None:
    trace = write_trace(tmp_path / "t.trace", recorded_on, "random")
    got = read_trace(trace)
    assert got.fields.release == (recorded_on or "0.5.23")
    assert [(r.chunks, r.end) for r in got.requests] == list(golden_streams("random").values())
    assert got.messages == len(frames(GOLDEN / "random.in.bin")) and got.skipped == 0


@pytest.mark.parametrize("target", ["0.5.12", "0.5.14", "0.5.16", "0.5.20", "0.5.23"])
@pytest.mark.parametrize("recorded_on", [None, "0.5.16"])
def test_a_trace_replays_into_another_release(tmp_path: Path, recorded_on: str | None,
                                              target: str) -> None:
    recorded = read_trace(write_trace(tmp_path / "t.trace", recorded_on, "random")).requests
    got = replay(recorded, target)
    for k, r in enumerate(recorded):
        assert got[f"new-{k}"] == [t for c in r.chunks for t in c], k


def test_a_pickled_trace_replays_without_sglang(tmp_path: Path,
                                                sglang_modules: types.ModuleType,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.14 sends pickles: the trace's are read by the names their objects carry, SGLang's
    classes loaded as inert records (here SGLang is not installed at all), and a pickle
    that would run anything is not loaded."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> Any:
            import os

            return (os.system, (f"touch {marker}",))

    trace = write_trace(tmp_path / "t.trace", "0.5.14", "random", sglang_modules,
                        extra=[pickle.dumps(Evil()), b"\x80\x05not a pickle"])
    for name in list(sys.modules):  # the reader does not import what a pickle names
        if name == "sglang" or name.startswith("sglang."):  # SGLang's, not sglang_tok's
            monkeypatch.delitem(sys.modules, name)
    got = read_trace(trace)
    assert got.fields.release == "0.5.14" and got.skipped == 2 and not marker.exists()
    assert [(r.chunks, r.end) for r in got.requests] == list(golden_streams("random").values())
    replayed = replay(got.requests, "0.5.23")
    assert replayed["new-0"] == [t for c in got.requests[0].chunks for t in c]


def test_a_trace_of_another_release_without_its_layout_is_refused(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.trace", "0.5.16", "plain",
                        meta={"sglang_layout": None})
    with pytest.raises(ReplayRefused) as err:
        read_trace(trace)
    text = str(err.value)
    assert "\n" not in text and "0.5.23's (53 fields)" in text and "sglang_layout" in text


def test_a_trace_without_what_a_replay_reads_is_refused(tmp_path: Path) -> None:
    layout = msgspec.to_builtins(known("0.5.16"))
    layout["token_ids"] = [n for n in layout["token_ids"] if n != "output_ids"]
    trace = write_trace(tmp_path / "t.trace", "0.5.16", "plain",
                        meta={"sglang_layout": layout})
    with pytest.raises(ReplayRefused, match=r"^the trace .* \(recorded on SGLang 0\.5\.16\) "
                                            r"cannot be replayed: its BatchTokenIDOutput has "
                                            r"no output_ids$"):
        read_trace(trace)


def test_a_target_that_needs_what_neither_gives_is_refused(tmp_path: Path) -> None:
    trace = read_trace(write_trace(tmp_path / "t.trace", "0.5.16", "plain"))
    names = (*known_fields("0.5.23").token_ids, "draft_token_ids")
    refusal = replay_refusal(trace, FieldMap("0.6.0", names, None))
    assert refusal is not None and "\n" not in refusal
    assert "recorded on SGLang 0.5.16" in refusal and "SGLang 0.6.0" in refusal
    assert refusal.endswith("requires draft_token_ids, which the trace does not carry and "
                            "the stand-in does not make")
    for release in ("0.5.12", "0.5.20", "0.5.23"):
        assert replay_refusal(trace, FieldMap(release, known_fields(release).token_ids,
                                          None)) is None


def test_recorded_logprobs_go_with_their_ids(tmp_path: Path) -> None:
    """A recorded request's output logprobs replay with its ids into a request that asks
    for as many top logprobs; one that asks for another count gets its own."""
    got = read_trace(write_trace(tmp_path / "t.trace", "0.5.19", "logprobs"))
    with_lp = [r for r in got.requests if r.logprobs is not None]
    assert with_lp
    rec = with_lp[0]
    first = next(lp for lp in rec.logprobs or [] if lp is not None)
    k = len(first.top_val[0]) if first.top_val else 0
    for top in (k, k + 1):
        core = Core(Replayed([rec]), None, EOS, TOKENIZER.get_vocab_size(), wire_beams)
        core.add(Ask(rid="x", input_ids=(5, 6), return_logprob=True, top_logprobs_num=top,
                     sampling=Sampling(max_new_tokens=1 << 20, ignore_eos=True)))
        vals: list[float] = []
        tops: list[Any] = []
        while core.busy:
            cols = core.step()
            if cols is not None:
                vals += cols["output_token_logprobs_val"][0]
                tops += cols["output_top_logprobs_val"][0]
        want = [v for lp in rec.logprobs or [] if lp is not None for v in lp.val]
        assert vals == want
        if top == k and k:
            assert tops == [v for lp in rec.logprobs or [] if lp is not None
                            for v in lp.top_val]
        else:
            assert all(len(t) == top for t in tops)


def test_recordings_keeps_its_shape(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.trace", None, "stops")
    assert recordings(trace) == list(golden_streams("stops").values())
