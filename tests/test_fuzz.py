"""Fuzzing the ring: random and mutated frames of every tag, among valid traffic.

The service never crashes or hangs; requests no bad frame named stay exact; every
malformed frame is counted by its reason; every rid a dropped frame names is ended.
The long run is `python scripts/fuzz.py --minutes 10`.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator

import pytest
from fuzzing import bad_control, classify, fuzz_batch, mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service import Service

from sglang_tok.tokenizer import load
from sglang_tok.workload import PlanSpec, make_requests, schedule, verify

INFO = load("deepseek-v4")
EXAMPLES = int(os.environ.get("SGLANG_TOK_FUZZ_EXAMPLES", "100"))
_round = itertools.count()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = Service(tmp_path_factory.mktemp("fuzz"), shards=2).start()
    yield svc
    svc.stop()


def dropped(svc: Service) -> Counter[str]:
    """Frames dropped by reason."""
    return Counter({k.split('"')[1]: int(v) for k, v in svc.metrics().items()
                    if k.startswith("sglang_tok_frames_dropped_total{")})


def tracebacks(svc: Service) -> int:
    """Tracebacks in the service log: an input that reaches one found a bug."""
    return svc.log_path.read_text(errors="replace").count("Traceback (most recent call last)")


def fuzz_round(svc: Service, data: st.DataObject) -> None:
    n = next(_round)  # fresh rids for every run of an example, replays included
    seed = data.draw(st.integers(0, 2**16), label="plan seed")
    reqs = make_requests(INFO, PlanSpec(requests=6, concurrency=6, min_tokens=2, max_tokens=12,
                                        ids_per_row=(1, 3), stop_share=0.3, seed=seed),
                         prefix=f"ok{n:07d}")  # fixed width: frame sizes depend on draws only
    fz = [f"fz{n:07d}-{i}" for i in range(4)]
    svc.barrier(timeout=60)  # a round that failed half-way must not leak into this one
    before = dropped(svc)
    svc.front.violations.clear()
    want: Counter[str] = Counter()
    tainted: set[str] = set()
    named_by_drops: set[str] = set()
    for step in schedule(reqs, 6, seed):
        frames = [*step.opens, *([step.batch] if step.batch else []), *step.ends]
        for f in frames:
            svc.send(f)
        for _ in range(data.draw(st.integers(0, 3), label="fuzz frames")):
            source = data.draw(st.sampled_from(["junk", "mutant", "control", "bytes"]))
            if source == "junk":
                bad = data.draw(fuzz_batch(fz, INFO.vocab_size))
            elif source == "mutant":
                bad = mutate(data.draw(st.sampled_from(frames or [step.batch or b"\x02"])), data)
            elif source == "control":
                bad = bad_control(data, data.draw(st.sampled_from(fz + [r.rid for r in reqs])))
            else:
                bad = data.draw(st.binary(max_size=64))
            reason, failed, names = classify(bad)
            if reason is not None:
                want[reason] += 1
                named_by_drops.update(failed)
            tainted.update(failed)
            tainted.update(names)
            svc.send(bad)
        svc.front.poll(0)
    svc.barrier(timeout=60)
    assert svc.health()[0] == 200, svc.logs()
    got = dropped(svc) - before
    assert got == want, (got, want)
    assert got["internal"] == 0 and not tracebacks(svc), svc.logs()
    for r in reqs:
        out = svc.front.requests.get(r.rid)
        if r.rid in tainted:
            assert out is None or out.finished or r.rid not in named_by_drops, r.rid
        else:
            assert not verify(r, out, INFO), verify(r, out, INFO)
    for rid in named_by_drops:
        out = svc.front.requests.get(rid)
        assert out is not None and out.finished, rid
    # a fuzzed OPEN may legally reopen (reuse) a rid it names: judge only the others
    bad = [v for v in svc.front.violations if v.split(":")[0] not in tainted
           and not v.startswith("fz")]
    assert not bad, bad[:5]


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzzed_ring_never_breaks_the_service(service: Service, data: st.DataObject) -> None:
    fuzz_round(service, data)
