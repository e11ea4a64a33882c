"""Inside SGLang the service follows SGLang (issue 37): as many shards as
`--detokenizer-worker-num`, unpinned unless `SGLANG_TOK_PIN` asks, and then only on cores
SGLang's schedulers are not pinned to, spread so that servers on one node do not stack.
The plan is pure (`integrations/sglang/cores.py`); here on fake 64-core masks."""

from __future__ import annotations

import types

import psutil
import pytest

from sglang_tok.integrations.sglang import cores, launcher, plugin
from sglang_tok.process import parse_cpu_list

MASK = range(64)
PORT = 30000


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_unpinned_unless_asked(workers: int) -> None:
    for off in (None, "", "0", "false", "off", "No"):
        setting = cores.pin_setting(off)
        assert setting is False
        assert cores.choose(setting, workers, PORT, MASK)[0] is None


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_asked_each_server_gets_a_slot_of_its_own_from_the_top(workers: int) -> None:
    size = cores.processes(workers)  # one worker: the egress alone (its shard inside)
    slots = 64 // size
    plans = [cores.choose(True, workers, port, MASK)[0] for port in range(PORT, PORT + slots)]
    for got in plans:
        assert got is not None and len(got) == size and got == sorted(got)
        assert set(got) <= set(MASK)
    used = [c for got in plans for c in got or []]
    assert len(used) == len(set(used)) == slots * size  # neighbouring ports never stack
    assert cores.plan(workers, MASK, 0) == list(range(64 - size, 64))  # slot 0: the top
    # the same port, the same plan: a restarted server lands where it was
    assert cores.choose(True, workers, PORT, MASK) == cores.choose(True, workers, PORT, MASK)
    # ports a whole lap of slots apart share a slot
    assert cores.plan(workers, MASK, PORT) == cores.plan(workers, MASK, PORT + slots)


def test_the_plans_on_a_64_core_mask_at_port_30000() -> None:
    """The numbers an operator reads in the log: slot 30000 % slots from the top."""
    assert cores.choose(True, 1, PORT, MASK)[0] == [15]  # 64 slots of 1: slot 48
    assert cores.choose(True, 2, PORT, MASK)[0] == [25, 26, 27]  # 21 slots: slot 12
    got, why = cores.choose(True, 8, PORT, MASK)  # 7 slots: slot 5; core 0 in none
    assert got == list(range(10, 19))
    assert why == "pinned to cores 10-18 of the launcher's cores 0-63 (slot by port 30000)"


def test_sglangs_scheduler_cores_are_not_the_services() -> None:
    """SGLANG_SET_CPU_AFFINITY=1: SGLang's set_gpu_proc_affinity gives each GPU's
    scheduler physical // tp_per_node cores and their hyperthread siblings."""
    # 8 GPUs in one tp-8 server, 60 physical cores without hyperthreads: 7 each, 0-55
    gpus = cores.server_gpu_ids(base_gpu_id=0, gpu_id_step=1, tp_size=8, pp_size=1, nnodes=1)
    assert gpus == list(range(8))
    held = cores.scheduler_cores(gpus, 8, physical=60, logical=60)
    assert held == set(range(56))
    assert cores.choose(True, 1, PORT, range(60), held)[0] == [59]  # 4 slots: slot 0
    assert cores.choose(True, 2, PORT, range(60), held)[0] == [57, 58, 59]  # 1 slot
    got, why = cores.choose(True, 8, PORT, range(60), held)
    assert got is None and why.startswith("unpinned: 4 cores in the launcher's cores 0-59 "
                                          "less the schedulers' 0-55")
    # one tp-1 server per GPU, 32 physical cores with hyperthreads: each scheduler may run
    # on every core, so no core is the service's
    for gpu in range(8):
        held = cores.scheduler_cores([gpu], 1, physical=32, logical=64)
        assert held == set(MASK)
        assert cores.choose(True, 1, PORT, MASK, held)[0] is None
    # --base-gpu-id 4 --gpu-id-step 2, tp 2: GPUs 4 and 6
    assert cores.server_gpu_ids(4, 2, 2, 1, 1) == [4, 6]


def test_a_cpu_list_is_the_pool_as_given() -> None:
    setting = cores.pin_setting("48-63")
    assert setting == list(range(48, 64))
    assert cores.choose(setting, 1, PORT, MASK)[0] == [63]  # 16 slots: slot 0
    one_slot = cores.pin_setting("40,41,42")
    assert cores.choose(one_slot, 2, PORT, MASK)[0] == [40, 41, 42]
    got, why = cores.choose(cores.pin_setting("60-70"), 8, PORT, MASK)
    assert got is None and "of which the launcher may use 60-63" in why
    with pytest.raises(cores.PinSettingError, match="SGLANG_TOK_PIN='all'.*CPU list"):
        cores.pin_setting("all")


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_the_launchers_arguments(workers: int) -> None:
    serving = types.SimpleNamespace(tokenizer_path=None, skip_tokenizer_init=True,
                                    detokenizer_worker_num=workers)
    ports = types.SimpleNamespace(detokenizer_ipc_name="ipc:///x/d", tokenizer_ipc_name="ipc:///x/t")
    unpinned = launcher.service_args(serving, ports)
    assert unpinned[unpinned.index("--shards") + 1] == str(workers)
    assert "--no-pin" in unpinned and "--cores" not in unpinned
    plan = cores.choose(True, workers, PORT, MASK)[0]
    pinned = launcher.service_args(serving, ports, cores=plan)
    assert pinned[pinned.index("--shards") + 1] == str(workers)
    assert parse_cpu_list(pinned[pinned.index("--cores") + 1]) == plan
    assert "--no-pin" not in pinned
    default = types.SimpleNamespace(tokenizer_path=None, skip_tokenizer_init=True)
    args = launcher.service_args(default, ports)  # SGLang's default: one, as its own
    assert args[args.index("--shards") + 1] == "1"


@pytest.mark.parametrize(("env", "want"), [
    ({}, None),
    ({"SGLANG_TOK_PIN": "1"}, [63]),  # 64 slots of 1: slot 30016 % 64 = 0
    ({"SGLANG_TOK_PIN": "1", "SGLANG_SET_CPU_AFFINITY": "1"}, None),  # tp 1: all theirs
    ({"SGLANG_TOK_PIN": "8-9", "SGLANG_SET_CPU_AFFINITY": "true"}, [9]),  # of those given
])
def test_the_plugin_reads_its_setting_and_sglangs(monkeypatch: pytest.MonkeyPatch,
                                                  env: dict[str, str],
                                                  want: list[int] | None) -> None:
    for name in ("SGLANG_TOK_PIN", "SGLANG_SET_CPU_AFFINITY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("sglang_tok.process.usable_cores", lambda: list(MASK))
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 64 if logical else 32)
    server_args = types.SimpleNamespace(port=30016, base_gpu_id=0, gpu_id_step=1, tp_size=1,
                                        pp_size=1, nnodes=1)
    assert plugin.placement(server_args, 1) == want
