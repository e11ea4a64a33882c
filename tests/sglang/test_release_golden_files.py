"""The golden messages of every SGLang release (`tests/golden/sglang/releases/<release>/`,
made by scripts/sglang/release_goldens.py with each release's own classes and its real
DetokenizerManager) are whole and as that release's layout says, without SGLang: every
release folder has the nine cases; every file's framing reads; a msgpack release's
messages are arrays whose tag and field count match `layouts/<release>.json` and whose
replies add up, per request, to the manifest's `exact`; a pickle release's messages are
only checked for their framing and pickle header (nothing here unpickles)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "sglang"
RELEASES = GOLDEN / "releases"
LAYOUTS = ROOT / "sglang_tok" / "protocols" / "sglang" / "layouts"
CASES = list(json.loads((GOLDEN / "manifest.json").read_text())["cases"])
VERSIONS = sorted((p.stem for p in LAYOUTS.glob("*.json")),
                  key=lambda v: tuple(int(x) for x in v.split(".")))
MAX_BYTES = 4_000_000


def layout(release: str) -> dict[str, Any]:
    return json.loads((LAYOUTS / f"{release}.json").read_text())


def manifest(release: str) -> dict[str, Any]:
    return json.loads((RELEASES / release / "manifest.json").read_text())


def frames(path: Path) -> list[bytes]:
    """A file of messages: each a little-endian u32 length, then that many bytes."""
    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        assert at + 4 <= len(data), f"{path.name}: a length cut at {at}"
        (n,) = struct.unpack_from("<I", data, at)
        assert at + 4 + n <= len(data), f"{path.name}: a message cut at {at}"
        out.append(data[at + 4:at + 4 + n])
        at += 4 + n
    return out


def _ext(code: int, data: memoryview) -> tuple[str, int]:
    return ("ext", code)


def test_every_release_is_here() -> None:
    assert VERSIONS[0] == "0.5.12" and len(VERSIONS) >= 12
    assert sorted(p.name for p in RELEASES.iterdir() if p.is_dir()) == sorted(VERSIONS)


def test_the_releases_stay_small() -> None:
    total = sum(p.stat().st_size for p in RELEASES.rglob("*") if p.is_file())
    assert total < MAX_BYTES, total


@pytest.mark.parametrize("release", VERSIONS)
def test_release_has_the_nine_cases(release: str) -> None:
    m, lay = manifest(release), layout(release)
    assert m["release"] == release and m["ipc"] == lay["ipc"]
    assert list(m["cases"]) == CASES
    for case in CASES:
        spec = m["cases"][case]
        assert (RELEASES / release / f"{case}.in.bin").is_file(), case
        assert (RELEASES / release / f"{case}.out.bin").is_file(), case
        assert spec["requests"] == len(spec["exact"]) > 0, case
        assert spec["exact_equals_0.5.23"] == (not spec["not_as_0.5.23"]), case


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("release", VERSIONS)
def test_release_case_files(release: str, case: str) -> None:
    m, lay = manifest(release), layout(release)
    spec = m["cases"][case]
    ins = frames(RELEASES / release / f"{case}.in.bin")
    outs = frames(RELEASES / release / f"{case}.out.bin")
    assert len(ins) == spec["messages"] and len(outs) == spec["replies"] == len(ins)
    if m["ipc"] == "pickle":
        head = bytes([0x80, m["pickle_protocol"]])
        for msg in ins + outs:  # header, a frame (protocol 4 on), the STOP at the end
            assert msg[:2] == head and msg[-1:] == b"."
            if m["pickle_protocol"] >= 4:
                assert msg[2:3] == b"\x95"
        return

    ext_arrays = m["arrays"].startswith("msgpack ext 1")
    decode_ids = lay["token_ids"].index("decode_ids")
    rows = 0
    for msg in ins:
        arr = msgspec.msgpack.decode(msg, ext_hook=_ext)
        assert isinstance(arr, list) and arr[0] == "BatchTokenIDOutput"
        assert len(arr) - 1 == len(lay["token_ids"])
        rows += len(arr[1 + lay["token_ids"].index("rids")])
        for ids in arr[1 + decode_ids]:  # an array.array: ext 1, or [typecode, bytes]
            assert ids == ("ext", 1) if ext_arrays else \
                (isinstance(ids, list) and ids[0] == "q" and isinstance(ids[1], bytes))
    assert rows == spec["rows"]

    rids, strs = lay["str_output"].index("rids"), lay["str_output"].index("output_strs")
    texts: dict[str, str] = {}
    for msg in outs:
        arr = msgspec.msgpack.decode(msg, ext_hook=_ext)
        assert isinstance(arr, list) and arr[0] == "BatchStrOutput"
        assert len(arr) - 1 == len(lay["str_output"])
        for rid, text in zip(arr[1 + rids], arr[1 + strs], strict=True):
            texts[rid] = texts.get(rid, "") + text
    assert texts == spec["exact"]
