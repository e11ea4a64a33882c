"""The shards' output bytes, pinned: the golden BATCH frames (tests/golden/*.bin) and a trace
that ends requests every way there is (the scheduler's stop token, stop string, list of
stop ids, length and abort; a service stop string; a parser's `"tool_calls": true`; ERROR,
ABORT, `stream: false`, `no_stop_trim`, attribution) give, in DELTAS, COLUMNS and PACKED,
with one shard and two, exactly the bytes recorded in `tests/golden/outputs.json`.

The recording is `main`'s from before the finish became a typed union (issue 43, item 4):
a finish decoded into `sglang_tok.finish`'s structs encodes as the map it came as, key
order and presence included. This module imports nothing of the tests' helpers, so that
another checkout's python can run it to record its own bytes:

    python tests/shard/test_output_bytes.py > tests/golden/outputs.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from sglang_tok.protocols.model import batch, control, output
from sglang_tok.tokenizer import TokenizerInfo, load
from sglang_tok_testkit.local_route import LocalRoute
from shards.messages.table import RidTable

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
RECORDED = GOLDEN / "outputs.json"
FORMATS = ("deltas", "columnar", "packed")
SHARDS = (1, 2)

DS_OUTPUT = (
    "<think>\n先想一想: the user wants 東京 weather 🌤️.\n</think>\n\nChecking now.\n\n"
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">東京 🙂</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
PLAIN = "Shards decode 多语言 text, emoji 👍🏽 too.\n\nAnd then some more text 🙂 here"
PARSERS = {"reasoning_parser": "deepseek-r1", "tool_parser": "deepseekv4"}


def _open(rid: str, **opts: Any) -> bytes:
    return control.encode_control(control.Open(rid, **opts))


def ending_trace(info: TokenizerInfo) -> list[bytes]:
    """Requests that end every way, their rows spread over frames of 3 ids per row."""
    def enc(s: str) -> list[int]:
        return info.tokenizer.encode(s, add_special_tokens=False).ids

    plain, parsed = enc(PLAIN), enc(DS_OUTPUT)
    eos = 1  # an id the scheduler matched as a stop token (any id: its text is left out)
    abort = {"type": "abort", "message": "client gone", "status_code": 499, "err_type": None}
    # rid -> (ids, the scheduler's finish on its last row, or how the request ends)
    reqs: dict[str, tuple[list[int], Any]] = {
        "token": (plain + [eos], {"type": "stop", "matched": eos}),
        "token-list": (plain + [eos], {"type": "stop", "matched": [7, eos]}),
        "string": (plain, {"type": "stop", "matched": "more"}),
        "length": (plain, {"type": "length", "length": len(plain)}),
        "abort": (plain, abort),
        "abort-bare": (plain, {"type": "abort", "message": "Abort in waiting queue"}),
        "service-stop": (plain, {"type": "length", "length": len(plain)}),
        "parser": (parsed, {"type": "length", "length": len(parsed)}),
        "parser-token": (parsed + [eos], {"type": "stop", "matched": eos}),
        "parser-stop": (parsed, {"type": "length", "length": len(parsed)}),
        "parser-error": (parsed, "error"),
        "error": (plain, "error"),
        "aborted": (plain, "abort"),
        "whole": (plain + [eos], {"type": "stop", "matched": eos}),
        "kept": (plain + [eos], {"type": "stop", "matched": eos}),
        "attributed": (plain + [eos], {"type": "stop", "matched": eos}),
        "attributed-string": (plain, {"type": "stop", "matched": "more"}),
    }
    opens = [_open("service-stop", stop=["emoji"]), _open("parser", **PARSERS),
             _open("parser-token", **PARSERS), _open("parser-error", **PARSERS),
             _open("parser-stop", stop=["Checking"], include_stop_str_in_output=True,
                   **PARSERS),
             _open("whole", stream=False), _open("kept", no_stop_trim=True),
             _open("attributed", attribution=True), _open("attributed-string", attribution=True,
                                                         continuous_usage=True)]
    frames = list(opens)
    step = 0
    while True:
        rows = []
        for rid, (ids, end) in reqs.items():
            chunk = ids[3 * step:3 * step + 3]
            if not chunk:
                continue
            last = 3 * step + 3 >= len(ids)
            if last and isinstance(end, str):
                continue  # ended by ERROR or ABORT instead of a last row
            rows.append({"rid": rid, "ids": chunk, "prompt_tokens": 11, "cached_tokens": 2,
                         "finish": end if last else None})
        if not rows:
            break
        frames.append(batch.encode_batch(rows))
        step += 1
        if step == 4:
            frames.append(control.encode_control(control.Abort(["aborted"])))
    frames.append(control.encode_control(control.Error("error", "scheduler failed")))
    frames.append(control.encode_control(control.Error("parser-error", "scheduler failed")))
    return frames


def cases(info: TokenizerInfo) -> dict[str, list[bytes]]:
    got = {f.stem: [f.read_bytes()] for f in sorted(GOLDEN.glob("*.bin"))}
    got["endings"] = ending_trace(info)
    return got


def output_bytes(info: TokenizerInfo, frames: list[bytes], fmt: str, nshards: int
                 ) -> list[bytes]:
    """Every output message the shards send for these frames, in order (shard by shard per
    frame), encoded."""
    tables = [RidTable(info, k) for k in range(nshards)]
    route = LocalRoute(nshards)
    seqs = [0] * nshards
    out = []
    for frame in frames:
        sinks = [output.output_sink(fmt) for _ in range(nshards)]
        route.feed(frame, tables, sinks)
        for k, sink in enumerate(sinks):
            if len(sink):
                out.append(output.encode_output(fmt, k, seqs[k], sink))
                seqs[k] += 1
    return out


def record(info: TokenizerInfo) -> dict[str, list[str]]:
    """Each case's messages per format and shard count: the golden frames' as hex, the
    trace's as their sha256."""
    got = {}
    for name, frames in cases(info).items():
        for fmt in FORMATS:
            for n in SHARDS:
                msgs = output_bytes(info, frames, fmt, n)
                got[f"{name}/{fmt}/{n}"] = [m.hex() for m in msgs] if name != "endings" else \
                    [hashlib.sha256(m).hexdigest() for m in msgs]
    return got


INFO: TokenizerInfo = load("deepseek-v4")


def test_every_output_is_the_recorded_bytes() -> None:
    want = json.loads(RECORDED.read_text())
    got = record(INFO)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key] == want[key], key


def test_the_recording_ends_requests_every_way() -> None:
    """The trace's last deltas carry every finish form (decoded from its DELTAS)."""
    finishes = set()
    for msg in output_bytes(INFO, cases(INFO)["endings"], "deltas", 1):
        decoded = output.decode_output(msg)
        assert isinstance(decoded, output.Deltas)
        for d in decoded.deltas:
            if d.finish is not None:
                finishes.add(json.dumps(msgspec.to_builtins(d.finish)))
    assert {'{"type": "stop", "matched": 1}', '{"type": "stop", "matched": [7, 1]}',
            '{"type": "stop", "matched": "more"}', '{"type": "stop", "matched": "emoji"}',
            '{"type": "length", "length": 85, "tool_calls": true}',
            '{"type": "stop", "matched": 1, "tool_calls": true}',
            '{"type": "stop", "matched": "Checking"}',
            '{"type": "abort", "message": "client gone", "status_code": 499, "err_type": null}',
            '{"type": "abort", "message": "Abort in waiting queue"}',
            '{"type": "abort", "tool_calls": true}', '{"type": "abort"}'} <= finishes, finishes


# every form a finish takes on the wire: SGLang's `to_json` forms (an abort's fields each
# possibly nil, or absent as in SGLang's `push_abort`), the service's own, a parser's marker
FORMS: list[dict[str, Any]] = [
    {"type": "stop", "matched": 128001}, {"type": "stop", "matched": [7, 128001]},
    {"type": "stop", "matched": "\n\n"}, {"type": "stop"},
    {"type": "length", "length": 3}, {"type": "length"},
    {"type": "abort", "message": "client gone", "status_code": 499, "err_type": None},
    {"type": "abort", "message": "Aborted", "status_code": None, "err_type": "BadRequest"},
    {"type": "abort", "message": "Abort in waiting queue"}, {"type": "abort"},
    {"type": "stop", "matched": 1, "tool_calls": True}, {"type": "stop", "tool_calls": True},
    {"type": "length", "length": 9, "tool_calls": True}, {"type": "abort", "tool_calls": True},
]


def test_every_finish_form_encodes_as_the_map_it_came_as() -> None:
    """Decoded into the typed union and encoded again (msgpack and JSON), each form is the
    bytes it came as: the tag first, the fields in SGLang's order, absent keys absent,
    present nils present."""
    from sglang_tok.finish import Finish

    typed = msgspec.msgpack.Decoder(list[Finish])
    got = typed.decode(msgspec.msgpack.encode(FORMS))
    for form, fin in zip(FORMS, got):
        assert msgspec.msgpack.encode(fin) == msgspec.msgpack.encode(form), form
        assert msgspec.json.encode(fin) == msgspec.json.encode(form), form
        assert msgspec.to_builtins(fin) == form
    assert msgspec.json.decode(msgspec.json.encode(FORMS), type=list[Finish]) == got


if __name__ == "__main__":
    json.dump(record(INFO), sys.stdout, indent=0)
    sys.stdout.write("\n")
