"""What SGLang's detokenizer does beyond a row's text, at any shard count: beam search
outputs decoded (each returned sequence's `text`, as `decode_beam_search_output` fills
it), and the pickled per-row columns (`time_stats`, `customized_info`) carried with their
rows when a message's rows go to several shards or tokenizer workers (as SGLang's own
per-worker split does: unpickled, cut per row, pickled again)."""

from __future__ import annotations

import pickle
from typing import Any

import msgspec
from sglang_cases import SglangService, token_ids_message

from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import builtin
from sglang_tok.protocols.sglang.positions import Positions
from sglang_tok.tokenizer import load

INFO = load("deepseek-v4")
EOS = 1


def _pickled(obj: Any) -> msgspec.Raw:
    """SGLang's `wrap_as_pickle` on the wire: ["PickleWrapper", pickle bytes]."""
    return msgspec.Raw(msgspec.msgpack.encode(["PickleWrapper", pickle.dumps(obj)]))


def _unpickled(value: Any) -> Any:
    assert isinstance(value, list) and value[0] == "PickleWrapper", value
    return pickle.loads(value[1])


def test_beam_search_sequences_get_the_full_decode_of_their_tokens(
        sglang_service: SglangService) -> None:
    s = sglang_service
    s.side.clear()
    text = INFO.tokenizer.encode("Beam one. 一个光束", add_special_tokens=False).ids
    other = INFO.tokenizer.encode(" and the second", add_special_tokens=False).ids
    beams = wire.BeamOutput(sequences=[
        wire.BeamSequence(tokens=text + [EOS], cum_logprob=-1.5, beam_score=-0.2,
                          finish_reason={"type": "stop", "matched": EOS}),
        wire.BeamSequence(tokens=other, cum_logprob=-2.5, beam_score=-0.3,
                          finish_reason={"type": "length", "length": len(other)})])
    # a leader's only row: placeholder ids, and (SGLang's beam_completion_tokens) the ids
    # of every returned sequence as its count
    rows = [{"rid": f"beam-{k}", "ids": [0, 0, 0], "prompt": [671],
             "finish": {"type": "stop", "matched": EOS},
             "completion": len(text) + 1 + len(other), "skip": k != 1} for k in range(6)]
    plain = [{"rid": f"plain-{k}", "ids": text[:3], "completion": 3} for k in range(6)]
    msg = token_ids_message(rows + plain,
                            beam_search_output=[beams] * len(rows) + [None] * len(plain))
    s.send(msg)
    assert s.side.wait([r["rid"] for r in rows], timeout=20), s.side.rows
    for r in rows:
        (row,) = s.side.rows[r["rid"]]
        out = row["beam_search_output"]
        assert out[0] == "BeamSearchOutput"
        seqs = out[3]
        skip = r["skip"]
        # a matched stop token is trimmed from its own sequence, as SGLang's trim does
        assert seqs[0]["text"] == INFO.tokenizer.decode(text, skip_special_tokens=skip)
        assert seqs[1]["text"] == INFO.tokenizer.decode(other, skip_special_tokens=skip)
        assert [q["tokens"] for q in seqs] == [text + [EOS], other]
        assert seqs[0]["cum_logprob"] == -1.5 and seqs[1]["beam_score"] == -0.3
    for r in plain:
        assert s.side.rows[r["rid"]][0]["beam_search_output"] is None


def test_time_stats_and_customized_info_go_with_their_rows(
        sglang_service: SglangService) -> None:
    s = sglang_service
    s.side.clear()
    n = 24
    rows = [{"rid": f"ts-{k}", "ids": [19923 + k], "completion": 1} for k in range(n)]
    stats = [{"row": k, "forward_entry_time": 1.5 + k} for k in range(n)]
    info = {"score": [[0.5 * k] for k in range(n)], "tag": [f"t{k}" for k in range(n)]}
    s.send(token_ids_message(rows, time_stats=_pickled(stats),
                             customized_info=_pickled(info)))
    fin = [{**r, "ids": [14], "completion": 2, "finish": {"type": "length", "length": 2}}
           for r in rows]
    s.send(token_ids_message(fin))
    assert s.side.wait([r["rid"] for r in rows], timeout=20)
    for k, r in enumerate(rows):
        first = s.side.rows[r["rid"]][0]
        # the reply that carries row k carries row k's stats and info, whatever its part
        assert first["time_stats"] is not None, (r["rid"], first)
        got_stats = _unpickled(first["time_stats"])
        got_info = _unpickled(first["customized_info"])
        assert stats[k] in got_stats
        at = got_stats.index(stats[k])
        assert got_info["score"][at] == info["score"][k] and got_info["tag"][at] == f"t{k}"


def test_pickled_columns_are_cut_only_from_sglangs_own_process_tree() -> None:
    """A pickled list of per-row objects (`time_stats`) is cut by its items, which
    unpickles nothing: each shard's part carries its rows' stats from any peer. A pickle of
    another shape (`customized_info`, a map of per-row lists) is cut by unpickling, only
    from an ipc:// input (SGLang's launcher's); from a tcp:// peer the parts carry nil."""
    import numpy as np

    from sglang_tok.config import Config, finalize, from_sglang
    from sglang_tok.protocols.sglang.part import Fields
    from sglang_tok.protocols.sglang.pickled import cut_rows
    from sglang_tok.protocols.sglang.reader import SglangReader
    from sglang_tok.protocols.sglang.workers import WorkerMap

    rows = [{"rid": f"p-{k}", "ids": [14], "completion": 1} for k in range(12)]
    stats = [{"row": k} for k in range(12)]
    info = {"score": [k / 2 for k in range(12)]}
    msg = token_ids_message(rows, time_stats=_pickled(stats), customized_info=_pickled(info))
    fields = msgspec.msgpack.decode(msg, type=list[msgspec.Raw])
    # rows alternate between shards 0 and 1: each shard's rows in frame order
    order = np.array([*range(0, 12, 2), *range(1, 12, 2)])
    first = np.array([0, 6, 12, 12])
    positions = Positions(builtin())
    stats_at, info_at = positions.carried.index("time_stats"), positions.carried.index("customized_info")
    for per_row in (True, False):
        rows_of = SglangReader(positions, 512, 4096, frozenset(), WorkerMap(), per_row).step(
            fields, {})
        assert rows_of.carry is not None
        parts = rows_of.carry.cut(order, first, [0, 1], None)  # type: ignore[attr-defined]
        for k, part in parts.items():
            got = Fields(part, cut_rows if per_row else None)
            mine = [s for s in stats if s["row"] % 2 == k]
            assert _unpickled(msgspec.msgpack.decode(got.field(stats_at, 0, 6))) == mine
            assert _unpickled(msgspec.msgpack.decode(got.field(stats_at, 1, 3))) == mine[1:3]
            cut = msgspec.msgpack.decode(got.field(info_at, 0, 6))
            if per_row:
                assert _unpickled(cut) == {"score": info["score"][k::2]}
                assert _unpickled(msgspec.msgpack.decode(got.field(info_at, 2, 4))) == {
                    "score": info["score"][k::2][2:4]}
            else:
                assert cut is None
    ipc = Config(protocol="sglang", input="ipc:///tmp/x.ipc")
    assert from_sglang(ipc) and not from_sglang(
        Config(protocol="sglang", input="tcp://127.0.0.1:5555"))
    assert finalize  # (the flag is read from the finalized Config by egress and shards)
