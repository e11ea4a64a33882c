"""The hot loops' local metric buffers add up to what direct observation gives."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Histogram

from sglang_tok.metrics import LATENCY_BUCKETS, LocalCounter, LocalHistogram


def test_a_flushed_local_histogram_and_counter_expose_what_direct_calls_do() -> None:
    values = [0.0, 0.0001, 0.00011, 0.003, 0.0025, 7.0, 1e-9, 0.25, 0.2500001, 5.0]
    exposed: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]] = []
    for local in (False, True):
        reg = CollectorRegistry()
        hist = Histogram("lat", "latency", ["shard"], buckets=LATENCY_BUCKETS,
                         registry=reg).labels("0")
        count = Counter("frames", "frames", registry=reg)
        h = LocalHistogram(hist) if local else hist
        c = LocalCounter(count) if local else count
        for k, v in enumerate(values):
            h.observe(v)
            c.inc()
            if local and k == 4:  # flushed twice: the second adds only what came after
                assert isinstance(h, LocalHistogram) and isinstance(c, LocalCounter)
                h.flush()
                c.flush()
        if isinstance(h, LocalHistogram) and isinstance(c, LocalCounter):
            assert reg.get_sample_value("frames_total") == 5  # nothing since the flush yet
            h.flush()
            c.flush()
            h.flush()  # nothing new: adds nothing
        exposed.append({(s.name, tuple(sorted(s.labels.items()))): s.value
                        for m in reg.collect() for s in m.samples
                        if not s.name.endswith("_created")})
    direct, local = exposed
    assert direct.keys() == local.keys()
    for key, value in direct.items():  # the sum adds in another order: the last bit may differ
        assert math.isclose(local[key], value, rel_tol=1e-12), key
    assert local[("lat_bucket", (("le", "0.0001"), ("shard", "0")))] == 3
    assert local[("lat_count", (("shard", "0"),))] == 10
    assert local[("frames_total", ())] == 10
