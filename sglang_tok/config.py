"""The one frozen configuration object, validated once by the supervisor.

Children receive it at spawn; per-child facts (shard index, core) are arguments. No
library code reads environment variables.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import msgspec

from .tokenizer import DEFAULT_TOKENIZER


class ConfigError(ValueError):
    pass


class Config(msgspec.Struct, frozen=True):
    tokenizer: str = DEFAULT_TOKENIZER
    shards: int = 1
    input: str = ""  # the input ring the egress binds (PULL)
    output: str = ""  # the frontend's PULL the shards and egress connect to
    http: str = "127.0.0.1:8399"
    runtime_dir: str = ""
    ring_capacity: int = 1000  # input ring high-water mark, in frames
    link_capacity: int = 1000  # egress -> shard and output high-water marks, in messages
    max_frame_bytes: int = 64 << 20
    max_rid_length: int = 512
    max_row_ids: int = 4096
    max_requests: int = 65536
    # ended rids remembered per shard (the egress keeps shards x this) so that rows still in
    # flight after a request ended are ignored instead of reopening it; bounded memory
    ended_memory: int = 65536
    max_stops: int = 64
    max_stop_length: int = 1024
    model_name: str = ""
    engine: str = "0"
    pin: bool = True
    heartbeat_timeout: float = 5.0
    drain_timeout: float = 5.0
    # after an egress restart, rids it has never seen are failed for this long: their
    # first rows may have died in the old egress's socket (see docs/operations.md)
    restart_grace: float = 3.0
    restart_limit: int = 5  # restarts of one process within restart_window before giving up
    restart_window: float = 60.0
    curve_keys: str = ""  # directory of CURVE keys for tcp:// endpoints; empty = off
    log_level: str = "INFO"
    # output frames to the frontend: "deltas" (DELTAS, a map per delta) or "columnar"
    # (COLUMNS, one set of columns per message; protocol section 5.1)
    output_format: str = "deltas"

    def ipc(self, name: str) -> str:
        return f"ipc://{self.runtime_dir}/{name}"

    @property
    def http_host(self) -> str:
        return self.http.rsplit(":", 1)[0].strip("[]")

    @property
    def http_port(self) -> int:
        return int(self.http.rsplit(":", 1)[1])


def default_shards() -> int:
    """Usable cores minus one for the egress, at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def finalize(cfg: Config) -> Config:
    """Fill derived defaults (runtime dir, endpoints) and reject what cannot work."""
    if cfg.shards < 1:
        raise ConfigError(f"--shards must be >= 1, got {cfg.shards}")
    if cfg.shards > 256:
        raise ConfigError(f"--shards {cfg.shards} is more than 256")
    for name in ("ring_capacity", "link_capacity", "max_frame_bytes", "max_requests"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
    if cfg.output_format not in ("deltas", "columnar"):
        raise ConfigError(f"--output-format must be deltas or columnar, got {cfg.output_format!r}")
    runtime = cfg.runtime_dir or tempfile.mkdtemp(prefix="sglang-tok-")
    Path(runtime).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(runtime, 0o700)  # ipc sockets live here: only the service's user may connect
    if len(f"ipc://{runtime}/shard-255.ipc") > 100:
        raise ConfigError(f"runtime dir {runtime!r} is too long for ipc:// socket paths")
    try:
        cfg_http_port = int(cfg.http.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        raise ConfigError(f"--http must be HOST:PORT, got {cfg.http!r}") from None
    if not 0 <= cfg_http_port < 65536:
        raise ConfigError(f"--http port out of range: {cfg_http_port}")
    if cfg.curve_keys:
        for name in ("service.key_secret", "frontend.key", "authorized-schedulers"):
            if not Path(cfg.curve_keys, name).exists():
                raise ConfigError(f"--curve-keys {cfg.curve_keys}: missing {name}; make the "
                                  "directory with `sglang-tok keygen DIR`")
    return msgspec.structs.replace(
        cfg, runtime_dir=runtime,
        input=cfg.input or f"ipc://{runtime}/input.ipc",
        output=cfg.output or f"ipc://{runtime}/output.ipc",
        model_name=cfg.model_name or cfg.tokenizer)
