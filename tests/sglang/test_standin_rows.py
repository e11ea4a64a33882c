"""The stand-in scheduler's messages are SGLang's: for every golden case, the same requests
stepped through the stand-in (`standin.core.Core`) give the golden scheduler messages,
field by field, message by message.

Each golden request is scripted from the golden messages themselves: its prompt (the
context before `read_offsets`), the ids of each of its rows (a step where it has no row
is a step it is not in the batch), its flags, and what ended it, turned into the sampling
parameters that end it by SGLang's rules (a length finish is `max_new_tokens`, a matched
string is a stop string, a matched id a stop token) rather than told. Three fields differ
by construction: the golden messages were written with SGLang's `BatchTokenIDOutput`
class directly, where the real scheduler (and so the stand-in) also fills
`weight_versions` on a finished row and sends the `spec_*` columns as empty lists; those
are checked for the scheduler's values instead.
"""

from __future__ import annotations

import array
from typing import Any

import msgspec
import pytest
from sglang_cases import CASES, GOLDEN, MANIFEST

from sglang_tok.tokenizer import load_tokenizer
from sglang_tok_standin.core import Core, wire_beams
from sglang_tok_standin.release_message import LAST_TESTED, FieldMap, encode, known_fields
from sglang_tok_standin.requests import Ask, Sampling
from sglang_tok_standin.streams import ChunkLogprobs, Stream
from sglang_tok_testkit.sglang_side import frames

_plain = msgspec.msgpack.Decoder(ext_hook=lambda code, data: (code, bytes(data)))
SPEC = ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_block_accept_tokens",
        "spec_num_cap_tokens", "spec_correct_drafts_histogram", "spec_cap_lens_histogram")
BY_CONSTRUCTION = frozenset(("weight_versions", *SPEC))
TOKENIZER = load_tokenizer("deepseek-v4")
EOS = frozenset([MANIFEST["eos"]])
NAMES = known_fields(LAST_TESTED).token_ids  # the golden messages' release's fields
FIELD_MAP = FieldMap(LAST_TESTED, NAMES, None)


def fields(msg: bytes, names: tuple[str, ...] = NAMES) -> dict[str, Any]:
    decoded = _plain.decode(msg)
    assert decoded[0] == "BatchTokenIDOutput" and len(decoded) == len(names) + 1
    return dict(zip(names, decoded[1:]))


def message(cols: dict[str, Any], field_map: FieldMap = FIELD_MAP) -> bytes:
    """A step's columns as the release's message (msgpack form), built by name."""
    return encode(field_map.kwargs(cols), field_map.fields)


def by_row(msg: dict[str, Any], name: str) -> Any:
    """A per-row column keyed by rid (the stand-in's batch order is its own: SGLang's
    TokenizerManager and detokenizer read each row alone), any other field as it is."""
    value, rids = msg[name], msg["rids"]
    if isinstance(value, list) and len(value) == len(rids) and name != "rids":
        return dict(zip(rids, value))
    return value


def ids_of(ext: Any) -> list[int]:
    """An `array` ext (type 1: metadata length, typecode, raw bytes) as its ids."""
    code, data = ext
    assert code == 1
    size = int.from_bytes(data[:4], "big")
    out = array.array(msgspec.msgpack.decode(data[4:4 + size]))
    out.frombytes(data[4 + size:])
    return out.tolist()


class Script:
    """What the golden messages say of one request."""

    def __init__(self, rid: str, first: int) -> None:
        self.rid = rid
        self.first = first  # the message of its first row
        self.steps: list[list[int] | None] = []
        self.logprobs: list[ChunkLogprobs] = []
        self.prompt: list[int] = []
        self.row: dict[str, Any] = {}
        self.finish: dict[str, Any] | None = None
        self.finish_at = -1
        self.logprob = False
        self.top = 0


def scripts(case: str) -> tuple[list[dict[str, Any]], dict[str, Script]]:
    msgs = [fields(m) for m in frames(GOLDEN / f"{case}.in.bin")]
    out: dict[str, Script] = {}
    for k, f in enumerate(msgs):
        seen = set()
        for i, rid in enumerate(f["rids"]):
            s = out.get(rid)
            if s is None:
                s = out[rid] = Script(rid, k)
                at = f["read_offsets"][i]
                s.prompt = ids_of(f["decode_ids"][i])[:at]
                s.row = {name: f[name][i] for name in (
                    "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
                    "http_worker_ipcs")}
            while len(s.steps) < k - s.first:
                s.steps.append(None)
            ids = ids_of(f["output_ids"][i])
            s.steps.append(ids)
            if f["output_token_logprobs_val"] is not None:
                val = f["output_token_logprobs_val"][i]
                s.logprob = s.logprob or bool(val)
                tops = f["output_top_logprobs_val"][i]
                s.top = max(s.top, max(map(len, tops), default=0))
                if val:
                    s.logprobs.append(ChunkLogprobs(val, tops, f["output_top_logprobs_idx"][i]))
            if f["finished_reasons"][i] is not None:
                s.finish, s.finish_at = f["finished_reasons"][i], k
            seen.add(rid)
    return msgs, out


def ask_of(s: Script) -> Ask:
    fin = s.finish or {}
    max_new = 1 << 20
    stops: tuple[str, ...] = ()
    stop_ids: frozenset[int] = frozenset()
    if fin.get("type") == "length":
        max_new = fin["length"]
    elif fin.get("type") == "stop" and isinstance(fin["matched"], str):
        stops = (fin["matched"],)
    elif fin.get("type") == "stop":
        stop_ids = frozenset([fin["matched"]])
    # an EOS that did not end it (the golden stream goes on past it): ignore_eos
    ignore_eos = not stop_ids and any(t in EOS for step in s.steps for t in step or ())
    longest = max((len(TOKENIZER.encode(x, add_special_tokens=False).ids) for x in stops),
                  default=0)
    sampling = Sampling(max_new_tokens=max_new, stop_strs=stops, stop_str_max_len=longest,
                        stop_token_ids=stop_ids, ignore_eos=ignore_eos,
                        skip_special_tokens=s.row["skip_special_tokens"],
                        spaces_between_special_tokens=s.row["spaces_between_special_tokens"],
                        no_stop_trim=s.row["no_stop_trim"])
    return Ask(rid=s.rid, input_ids=tuple(s.prompt), sampling=sampling,
               http_worker_ipc=s.row["http_worker_ipcs"], return_logprob=s.logprob,
               top_logprobs_num=s.top)


class Scripted:
    def __init__(self, by_rid: dict[str, Script]) -> None:
        self.by_rid = by_rid

    def stream(self, ask: Ask, index: int) -> Stream:
        s = self.by_rid[ask.rid]
        return Stream(iter(s.steps), s.finish, iter(s.logprobs))


def decode(ids: Any) -> str:
    return TOKENIZER.decode(list(ids), skip_special_tokens=False)


@pytest.mark.parametrize("case", CASES)
def test_standin_messages_are_the_golden_ones(case: str) -> None:
    golden, by_rid = scripts(case)
    core = Core(Scripted(by_rid), decode, EOS, TOKENIZER.get_vocab_size(), wire_beams)
    aborts = {s.finish_at: s for s in by_rid.values()
              if s.finish and s.finish["type"] == "abort"}
    for k, want in enumerate(golden):
        for s in by_rid.values():
            if s.first == k:
                core.add(ask_of(s))
        if k in aborts:  # the scheduler was told to end it before this step
            req = next(r for r in core.running if r.rid == aborts[k].rid)
            req.to_finish = aborts[k].finish
        cols = core.step()
        assert cols is not None, f"message {k}: the stand-in sent no rows"
        got = fields(message(cols))
        assert sorted(got["rids"]) == sorted(want["rids"]), f"message {k}"
        for name in NAMES:
            if name not in BY_CONSTRUCTION and name != "rids":
                assert by_row(got, name) == by_row(want, name), f"message {k}, {name}"
        assert got["spec_verify_ct"] == [] and all(got[n] == [] for n in SPEC)
        fins = got["finished_reasons"]
        if any(f is not None for f in fins):
            assert got["weight_versions"] == [
                None if f is None else [["default", 0, got["completion_tokens"][i]]]
                for i, f in enumerate(fins)]
        else:
            assert got["weight_versions"] is None
    assert core.step() is None and not core.busy
    assert {e.rid for e in core.ended} == set(by_rid)


def test_a_streaming_row_waits_while_its_tail_could_start_a_stop_string() -> None:
    """SGLang's `check_match_stop_str_prefix`: no row while the text so far ends with the
    start of a stop string; the ids go in the next row that is sent."""
    ids = TOKENIZER.encode("Hello world. The end", add_special_tokens=False).ids
    ask = Ask(rid="r", input_ids=(), sampling=Sampling(
        stop_strs=("world. Th",), stop_str_max_len=len(TOKENIZER.encode(
            "world. Th", add_special_tokens=False).ids), max_new_tokens=100))
    steps = [[t] for t in ids]

    class One:
        def stream(self, ask: Ask, index: int) -> Stream:
            return Stream(iter(steps))

    core = Core(One(), decode, EOS, TOKENIZER.get_vocab_size(), wire_beams)
    core.add(ask)
    sent: list[list[int]] = []
    fins = []
    while core.busy:
        cols = core.step()
        if cols is not None:
            sent += [list(x) for x in cols["output_ids"]]
            fins += cols["finished_reasons"]
    flat = [t for row in sent for t in row]
    assert fins[-1] == {"type": "stop", "matched": "world. Th"}
    assert "world. Th" in decode(flat) and len(flat) < len(ids)
    assert any(len(row) > 1 for row in sent)  # held ids went out together


def test_beam_search_group_sends_one_row_with_its_sequences() -> None:
    ask = Ask(rid="b", input_ids=(5, 6), sampling=Sampling(max_new_tokens=4, beam_width=3,
                                                          n=2))

    class Ids:
        def stream(self, ask: Ask, index: int) -> Stream:
            return Stream(iter([[100], [200], [300], [400], [500]]))

    core = Core(Ids(), decode, EOS, TOKENIZER.get_vocab_size(), wire_beams)
    core.add(ask)
    messages = []
    while core.busy:
        cols = core.step()
        if cols is not None:
            messages.append(fields(message(cols)))
    assert len(messages) == 1
    m = messages[0]
    assert m["finished_reasons"] == [{"type": "length", "length": 4}]
    assert ids_of(m["output_ids"][0]) == [0, 0, 0, 0]  # the leader's placeholders
    beams = m["beam_search_output"][0]
    assert beams[0] == "BeamSearchOutput"
    seqs = beams[3]
    assert [s["tokens"] for s in seqs][0] == [100, 200, 300, 400] and len(seqs) == 2
    assert m["completion_tokens"] == [8]
