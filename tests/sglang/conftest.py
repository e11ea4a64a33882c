"""The `sglang_service` fixture: one service per shard count for a module's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sglang_cases import SglangService


@pytest.fixture(scope="module", params=[1, 2, "inline"],
                ids=["1shard", "2shards", "inline"])
def sglang_service(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[SglangService]:
    """1 and 2 shard processes, and the one shard inside the egress (--inline-shard,
    what the plugin runs with --detokenizer-worker-num 1)."""
    shards, args = (1, ["--inline-shard"]) if request.param == "inline" else (request.param, [])
    with SglangService(tmp_path_factory.mktemp("sgl"), shards, args) as s:
        yield s
