"""Where the service runs inside SGLang: unpinned, as SGLang's own detokenizer, unless asked.

SGLang 0.5.23 places only its schedulers: `SGLANG_SET_CPU_AFFINITY=1` pins each to a block
of cores by its GPU id (`set_gpu_proc_affinity`), and NUMA binding (`--numa-node`,
`SGLANG_AUTO_NUMA_BIND`) keeps each on its GPU's node. Nothing places the detokenizer, so
the plugin has a setting of its own, `SGLANG_TOK_PIN` (read by `plugin.py`):

- unset, empty, `0`, `false`, `no`, `off`: no pinning (the default);
- `1`, `true`, `yes`, `on`, `auto`: pin within the launcher's affinity mask, less the cores
  SGLang pins this server's schedulers to (with `SGLANG_SET_CPU_AFFINITY=1`);
- a CPU list (`32-63`): pin within those cores (those in the launcher's mask), as given.

The plan (`plan`): the pool of cores, ascending, is cut into slots of `workers + 1` cores
(the egress and each shard), counted from the top of the pool down (the cores left over
when the pool does not divide are the lowest: core 0 and up, where the system's
housekeeping runs); the server takes slot `port % slots`, so servers on neighbouring
ports (one per GPU on a node, started with the same mask and setting) get cores of their
own while there are slots for all of them, and a restarted server lands where it was. A
pool without one slot: unpinned, and the launcher says why.

Every function here is pure (no environment, no affinity calls): `plugin.py` reads them.
"""

from __future__ import annotations

from collections.abc import Collection

from ...process import cpu_list_text, parse_cpu_list, shards_text

SETTING = "SGLANG_TOK_PIN"
_OFF = ("", "0", "false", "no", "n", "off")
_AUTO = ("1", "true", "yes", "y", "on", "auto")


class PinSettingError(ValueError):
    pass


def pin_setting(value: str | None) -> bool | list[int]:
    """SGLANG_TOK_PIN as False (no pinning), True (the automatic pool) or the pool given."""
    text = (value or "").strip().lower()
    if text in _OFF:
        return False
    if text in _AUTO:
        return True
    try:
        return parse_cpu_list(text)
    except ValueError as exc:
        raise PinSettingError(
            f"{SETTING}={value!r}: {exc}; expected 0 (no pinning, the default), 1 (pin "
            "within the launcher's cores) or a CPU list such as 32-63") from None


def server_gpu_ids(base_gpu_id: int, gpu_id_step: int, tp_size: int, pp_size: int,
                   nnodes: int) -> list[int]:
    """The GPU ids of this node's schedulers, as SGLang's `_launch_scheduler_processes`
    numbers them (node 0's share of tensor and pipeline ranks)."""
    pp_per_node = max(pp_size // nnodes, 1)
    tp_per_node = tp_size // max(nnodes // pp_size, 1)
    return sorted({base_gpu_id + pp * tp_per_node + tp * gpu_id_step
                   for pp in range(pp_per_node) for tp in range(tp_per_node)})


def scheduler_cores(gpu_ids: Collection[int], tp_per_node: int, physical: int,
                    logical: int) -> set[int]:
    """The cores `SGLANG_SET_CPU_AFFINITY=1` pins these GPUs' schedulers to: SGLang's
    `set_gpu_proc_affinity`, a block of physical cores per GPU and, with hyperthreads,
    their siblings."""
    per_gpu = physical // max(tp_per_node, 1)
    cores: set[int] = set()
    for gpu in gpu_ids:
        start = (gpu * per_gpu) % physical if physical else 0
        block = range(start, start + per_gpu)
        cores.update(block)
        if logical != physical:
            cores.update(c + physical for c in block)
    return cores


def processes(workers: int) -> int:
    """The service's decoding processes for SGLang's detokenizer workers: the egress and a
    shard each, or with one worker the egress alone (its shard inside: --inline-shard)."""
    return 1 if workers == 1 else workers + 1


def plan(workers: int, pool: Collection[int], key: int) -> list[int] | None:
    """The cores of the egress and `workers` shards (egress first), or None when the pool
    holds no slot of `processes(workers)` cores."""
    cores = sorted(set(pool))
    size = processes(workers)
    slots = len(cores) // size
    if not slots:
        return None
    end = len(cores) - (key % slots) * size
    return cores[end - size:end]


def choose(setting: bool | list[int], workers: int, port: int, mask: Collection[int],
           reserved: Collection[int] = ()) -> tuple[list[int] | None, str]:
    """The cores to pin the service onto (None: unpinned), and a line for the log.
    `mask`: the launcher's affinity; `reserved`: the cores SGLang pins its schedulers to;
    `port`: the SGLang server's, which spreads servers over the slots."""
    if setting is False:
        return None, f"unpinned ({SETTING} is off), as SGLang's own detokenizer"
    if setting is True:
        pool = sorted(set(mask) - set(reserved))
        where = f"the launcher's cores {cpu_list_text(sorted(mask))}"
        if reserved:
            where += f" less the schedulers' {cpu_list_text(sorted(reserved))}"
    else:
        pool = sorted(set(setting) & set(mask))
        where = f"{SETTING}={cpu_list_text(setting)}"
        if len(pool) < len(setting):
            where += f" (of which the launcher may use {cpu_list_text(pool) or 'none'})"
    cores = plan(workers, pool, port)
    if cores is None:
        return None, (f"unpinned: {len(pool)} cores in {where}, fewer than the egress and "
                      f"{shards_text(workers)} need ({processes(workers)})")
    return cores, f"pinned to cores {cpu_list_text(cores)} of {where} (slot by port {port})"
