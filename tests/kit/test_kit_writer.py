"""The scheduler-side writer: golden bytes from manifest rows, every id buffer kind."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import pytest

from sglang_tok.kit.scheduler import encode_step
from sglang_tok.protocols.model.batch import decode_batch, encode_batch

GOLDEN = Path(__file__).parent.parent / "golden"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())


def step_columns(rows: list[dict[str, Any]], ids_kind: str = "q") -> dict[str, Any]:
    """Manifest rows -> the columnar arguments a scheduler loop holds."""
    cols: dict[str, Any] = {
        "rids": [r["rid"] for r in rows],
        "ids": [array(ids_kind, r["ids"]) if ids_kind != "list" else list(r["ids"])
                for r in rows],
        "finish_reasons": [r["finish"] for r in rows],
        "prompt_tokens": [r["prompt_tokens"] for r in rows],
        "cached_tokens": [r["cached_tokens"] for r in rows],
        "reasoning_tokens": [r["reasoning_tokens"] for r in rows],
    }
    extras: dict[str, Any] = {}
    if any("logprobs" in r for r in rows):
        extras["output_logprobs"] = ([[v for v, _ in r.get("logprobs", [])] for r in rows],
                                     [[i for _, i in r.get("logprobs", [])] for r in rows])
    if any("top_logprobs" in r for r in rows):
        tops = [r.get("top_logprobs", []) for r in rows]
        extras["output_top"] = ([[[v for v, _ in pos] if pos else None for pos in t]
                                 for t in tops],
                                [[[i for _, i in pos] if pos else None for pos in t]
                                 for t in tops])
    if extras:
        cols["extras"] = extras
    if any("ended_outside_stream" in r for r in rows):
        cols["trailing"] = {"ended_outside_stream": [r.get("ended_outside_stream")
                                                     for r in rows]}
    return cols


@pytest.mark.parametrize("name", sorted(MANIFEST))
@pytest.mark.parametrize("ids_kind", ["q", "i", "list"])
def test_writer_rebuilds_each_golden_frame_byte_for_byte(name: str, ids_kind: str) -> None:
    entry = MANIFEST[name]
    want = (GOLDEN / entry["file"]).read_bytes()
    assert encode_step(**step_columns(entry["rows"], ids_kind)) == want


def test_numpy_style_buffers_are_joined_not_repacked() -> None:
    np = pytest.importorskip("numpy")
    rows = [np.arange(k, dtype=np.int64) + 1000 * k for k in range(5)]
    frame = encode_step([f"r{k}" for k in range(5)], rows)
    b = decode_batch(frame)
    assert [b.row(k)["ids"] for k in range(5)] == [r.tolist() for r in rows]
    f32 = [np.full(k, -0.5, dtype=np.float32) for k in range(5)]
    i32 = [np.arange(k, dtype=np.int32) for k in range(5)]
    frame = encode_step([f"r{k}" for k in range(5)], rows,
                        extras={"output_logprobs": (f32, i32)})
    b = decode_batch(frame)
    assert b.row(3)["output_logprobs"] == [[-0.5, 0], [-0.5, 1], [-0.5, 2]]


def test_writer_matches_the_reference_encoder_on_mixed_steps() -> None:
    rows = [{"rid": f"x{k}", "ids": list(range(k)), "finish": None, "prompt_tokens": k,
             "cached_tokens": 0, "reasoning_tokens": 0} for k in range(7)]
    rows[3]["finish"] = {"type": "length", "length": 3}
    frame = encode_step(**step_columns(rows))
    assert frame == encode_batch(rows)
    assert [decode_batch(frame).row(k) for k in range(7)] == rows


def test_mixed_item_sizes_and_short_columns_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_step(["a", "b"], [array("q", [1]), array("i", [2, 3, 4])])
    with pytest.raises(ValueError):
        encode_step(["a", "b"], [[1], [2]], prompt_tokens=[1])
    with pytest.raises(ValueError):
        encode_step(["a"], [[1]], extras={"nope": ([], [])})


def test_int32_rows_widen_the_same_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    import sglang_tok.kit.scheduler as scheduler

    entry = MANIFEST["spec"]
    want = (GOLDEN / entry["file"]).read_bytes()
    monkeypatch.setattr(scheduler, "_np", None)
    assert encode_step(**step_columns(entry["rows"], "i")) == want
