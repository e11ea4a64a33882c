"""The `sglang_service` fixture: one service per shard count for a module's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sglang_cases import SglangService


@pytest.fixture(scope="module", params=[1, 2], ids=["1shard", "2shards"])
def sglang_service(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[SglangService]:
    with SglangService(tmp_path_factory.mktemp("sgl"), request.param) as s:
        yield s
