"""Fuzzing the ring: random and mutated frames of every tag, among valid traffic.

The service never crashes or hangs; requests no bad frame named stay exact; every
malformed frame is counted by its reason; every rid a dropped frame names is ended.
The long run is `python scripts/load/fuzz.py --minutes 10`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from local_service import LocalService

from sglang_tok_testkit.fuzzing import fuzz_round

EXAMPLES = int(os.environ.get("SGLANG_TOK_FUZZ_EXAMPLES", "100"))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    svc = LocalService(tmp_path_factory.mktemp("fuzz"), shards=2).start()
    yield svc
    svc.stop()


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzzed_ring_never_breaks_the_service(service: LocalService, data: st.DataObject) -> None:
    fuzz_round(service, data)
