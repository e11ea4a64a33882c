"""The one frozen configuration object: every `sglang-tok serve` flag is one of its fields.

Each field's annotation carries its help text and its constraints (msgspec `Meta`); the CLI
generates its flags from them (`--ring-capacity` for `ring_capacity`), so a flag cannot be
missing or undocumented, and `validate` checks every constraint in one place. Children
receive the object at spawn; per-child facts (shard index, core) are arguments. No library
code reads environment variables.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import zmq
from msgspec import Meta

from . import endpoints
from .errors import ConfigError
from .process import cpu_list_text, parse_cpu_list, shards_text, usable_cores
from .tokenizer import DEFAULT_TOKENIZER

log = logging.getLogger("sglang_tok.config")

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
OutputFormat = Literal["deltas", "columnar", "packed"]
Protocol = Literal["native", "sglang"]


def _doc(description: str, **constraints: Any) -> Meta:
    return Meta(description=description, **constraints)


class Config(msgspec.Struct, frozen=True):
    protocol: Annotated[Protocol, _doc(
        "what the input ring reads and the output carries: native (docs/protocol.md "
        "sections 2-5) or sglang (SGLang's BatchTokenIDOutput in, BatchStrOutput out, msgpack "
        "IPC: the service is SGLang's detokenizer; section 11)")] = "native"
    sglang_tokenizer_workers: Annotated[int, _doc(
        "with --protocol sglang: SGLang's --tokenizer-worker-num; above 1, every reply goes to "
        "its row's worker, and a last row whose worker is unknown is logged, not sent to "
        "--output (SGLang's router there takes only rows that name one)", ge=1)] = 1
    sglang_layout: Annotated[str, _doc(
        "with --protocol sglang: the SGLang release whose messages the service reads, by field "
        "name: a layout file (the plugin writes the running SGLang's, read from its own "
        "classes) or a release this project was tested against (0.5.12 ... 0.5.23); default: "
        "the newest tested")] = ""
    sglang_own_tree: Annotated[bool, _doc(
        "with --protocol sglang: --input is SGLang's own single-node process tree even over "
        "tcp:// (SGLang's launcher puts the detokenizer on tcp://127.0.0.1 with DP attention), "
        "so SGLang's pickles in it may be unpickled; the plugin sets it only for an endpoint "
        "SGLang's own launcher made on this host, never for one other hosts can reach")] = False
    keep_stop_ids: Annotated[str, _doc(
        "with --protocol sglang: comma-separated stop token ids left in the text when they "
        "stop a request (SGLang keeps its tool parser's one-token call closers)",
        pattern=r"^(\d+(,\d+)*)?$")] = ""
    tokenizer: Annotated[str, _doc(
        "built-in name (deepseek-v4), a tokenizer.json, a directory holding one, or none "
        "(ids, usage and logprobs only, no text)")
    ] = DEFAULT_TOKENIZER
    shards: Annotated[int, _doc(
        "decoder processes (default: usable cores minus one, at least 1)", ge=1, le=256)] = 1
    inline_shard: Annotated[bool, _doc(
        "with --shards 1: the shard runs inside the egress's process (one process and one "
        "hop fewer per message: what a scheduler sending small messages at a fixed step rate "
        "pays most for; the two then restart together)")] = False
    input: Annotated[str, _doc(
        "input ring endpoint the service binds (PULL) (default ipc://RUNTIME/input.ipc)")] = ""
    output: Annotated[str, _doc(
        "frontend endpoint the shards and egress connect to (PUSH) "
        "(default ipc://RUNTIME/output.ipc)")] = ""
    http: Annotated[str, _doc("HOST:PORT for /health and /metrics (port 0: any free port, "
                              "written to RUNTIME/http.port)")] = "127.0.0.1:8399"
    runtime_dir: Annotated[str, _doc(
        "where ipc sockets live, made mode 0700 (default: a fresh temporary directory, "
        "removed when the service stops)")] = ""
    remove_runtime_dir: Annotated[bool, _doc(
        "remove --runtime-dir, with all it holds, when the service stops, also when it "
        "existed before (a launcher made it for this service alone; it must be empty)")
    ] = False
    ring_capacity: Annotated[int, _doc("input ring high-water mark, in frames", ge=1)] = 1000
    link_capacity: Annotated[int, _doc(
        "high-water mark of the egress-to-shard links and the output, in messages", ge=1)] = 1000
    max_frame_bytes: Annotated[int, _doc(
        "largest input frame; libzmq drops the connection of a sender that exceeds it",
        ge=1)] = 64 << 20
    max_rid_length: Annotated[int, _doc(
        "longest rid; a frame holding a longer one is dropped and its rids fail", ge=1)] = 512
    max_row_ids: Annotated[int, _doc(
        "most token ids in one BATCH row; a frame holding more is dropped", ge=1)] = 4096
    max_requests: Annotated[int, _doc(
        "live requests per shard; new rids beyond it get an error", ge=1)] = 65536
    ended_memory: Annotated[int, _doc(
        "ended rids remembered per shard (the egress keeps shards x this), so that rows still "
        "in flight after a request ended are ignored instead of reopening it", ge=0)] = 65536
    max_stops: Annotated[int, _doc("most stop strings in one OPEN", ge=0)] = 64
    max_stop_length: Annotated[int, _doc("longest stop string in an OPEN", ge=1)] = 1024
    max_tools_bytes: Annotated[int, _doc(
        "largest OPEN `tools` (the request's tool definitions, as JSON bytes); an OPEN over "
        "it ends with an error", ge=0, le=64 << 20)] = 1 << 20
    model_name: Annotated[str, _doc(
        "model_name label of the sglang: metrics (default: the --tokenizer value)")] = ""
    engine: Annotated[str, _doc("engine label of the sglang: metrics")] = "0"
    pin: Annotated[bool, _doc("pin the egress and each shard to a core of their own")] = True
    cores: Annotated[str, _doc(
        "the cores to pin onto, as a CPU list (0-3,8): the egress on the first, shard k on "
        "the next, encode workers on those left (default: every usable core); at least "
        "shards + 1, each one usable; unused with --no-pin", pattern=r"^[0-9,-]*$")] = ""
    exit_with_parent: Annotated[bool, _doc(
        "stop (drain, as on SIGTERM) when the process that started `serve` exits: for test "
        "harnesses and scripts, whose service must not outlive them when they are killed")] = False
    heartbeat_timeout: Annotated[float, _doc(
        "seconds without a heartbeat after which a process is stuck: SIGABRT (its stack goes "
        "to the log), then SIGKILL, then a restart", gt=0)] = 5.0
    boot_timeout: Annotated[float, _doc(
        "seconds from a process's spawn to its first heartbeat; a process that is late on its "
        "first start is killed and the service exits with code 3", gt=0)] = 30.0
    drain_timeout: Annotated[float, _doc(
        "seconds after SIGTERM/SIGINT for the deltas of accepted frames to leave, before the "
        "egress and shards are killed", ge=0)] = 5.0
    restart_grace: Annotated[float, _doc(
        "seconds after an egress restart during which rids the new egress has never seen "
        "fail (their first rows may have died with the old one)", ge=0)] = 3.0
    restart_limit: Annotated[int, _doc(
        "restarts of one process within --restart-window; its next death stops the service "
        "(exit code 1)", ge=0)] = 5
    restart_window: Annotated[float, _doc(
        "seconds over which --restart-limit counts a process's restarts", gt=0)] = 60.0
    record: Annotated[str, _doc(
        "append every input frame, with its arrival time, to this trace file (the project's "
        "trace format, sglang_tok/tracefile.py): a real scheduler's traffic, replayed "
        "later by scripts/load/replay.py or, for --protocol sglang, by the SGLang stand-in "
        "scheduler")] = ""
    curve_keys: Annotated[str, _doc(
        "directory from `sglang-tok keygen`: CURVE authentication and encryption on tcp:// "
        "endpoints (default: off)")] = ""
    log_level: Annotated[LogLevel, _doc("log level of every process")] = "INFO"
    output_format: Annotated[OutputFormat, _doc(
        "output frames to the frontend: deltas (DELTAS, a map per delta), columnar "
        "(COLUMNS, one set of columns per message; docs/protocol.md section 5.2) or packed "
        "(PACKED: COLUMNS with texts and ids as buffers; section 5.4)")] = "packed"
    # the encode service (docs/protocol.md section 9): off while encode_workers is 0
    encode_workers: Annotated[int, _doc(
        "encode worker processes behind a broker at --encode (0: no encode service)",
        ge=0, le=256)] = 0
    encode: Annotated[str, _doc(
        "endpoint of the encode service's ROUTER (default ipc://RUNTIME/encode.ipc when "
        "--encode-workers > 0)")] = ""
    encode_queue: Annotated[int, _doc(
        "encode requests waiting in the broker while every worker is busy; beyond it a "
        "request gets an error reply", ge=1)] = 1024
    encode_max_texts: Annotated[int, _doc("texts in one encode request", ge=1)] = 1024
    encode_max_text_chars: Annotated[int, _doc(
        "characters (code points) of one text in an encode request", ge=1)] = 1_000_000
    encode_max_total_chars: Annotated[int, _doc(
        "characters of all texts of one encode request together", ge=1)] = 2_000_000

    def ipc(self, name: str) -> str:
        return f"ipc://{self.runtime_dir}/{name}"

    @property
    def pin_cores(self) -> list[int]:
        """--cores as a list ([]: every usable core); finalize has checked it."""
        return parse_cpu_list(self.cores) if self.cores else []

    @property
    def kept_stop_ids(self) -> frozenset[int]:
        return frozenset(int(i) for i in self.keep_stop_ids.split(",") if i)

    @property
    def http_host(self) -> str:
        return self.http.rsplit(":", 1)[0].strip("[]")

    @property
    def http_port(self) -> int:
        return int(self.http.rsplit(":", 1)[1])


def from_sglang(cfg: Config) -> bool:
    """The input is SGLang's own process tree (an ipc:// socket on this host, as SGLang's
    launcher makes, or the loopback tcp:// one it makes for DP attention, which the plugin
    vouches for): its pickles may be unpickled, as SGLang itself does; from any other peer
    they never are."""
    return cfg.protocol == "sglang" and (cfg.input.startswith("ipc://") or cfg.sglang_own_tree)


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


_AT_FIELD = re.compile(r"^(?P<what>.*?)(?: - at `\$\.(?P<field>\w+)`)?$")


def refused(name: str, what: str, got: object) -> ConfigError:
    """The one shape of every refused value: `--flag: what is wrong (got value)`."""
    return ConfigError(f"{flag(name)}: {what} (got {got!r})")


def validate(fields: dict[str, Any]) -> Config:
    """A Config from field values, every `Meta` constraint checked; errors name the flag."""
    try:
        return msgspec.convert(fields, Config)
    except msgspec.ValidationError as exc:
        m = _AT_FIELD.match(str(exc))
        assert m is not None  # the pattern matches any string
        name = m["field"]
        if name is None:
            raise ConfigError(str(exc)) from None
        what = m["what"].replace("`", "")
        raise refused(name, f"{what[0].lower()}{what[1:]}", fields.get(name)) from None


def default_shards() -> int:
    """Usable cores minus one for the egress, at least one."""
    return max(1, len(usable_cores()) - 1)


def _endpoints(cfg: Config) -> list[tuple[str, str, bool]]:
    """(field, value, bound by the service) of every endpoint flag given a value."""
    given = [("input", cfg.input, True), ("output", cfg.output, False),
             ("encode", cfg.encode, True)]
    return [(name, value, bind) for name, value, bind in given if value]


def _check_syntax(cfg: Config) -> None:
    """Every endpoint flag as libzmq and asyncio would take it, before anything is made."""
    try:
        endpoints.parse_http(cfg.http)
    except endpoints.EndpointError as exc:
        raise refused("http", str(exc), cfg.http) from None
    seen: dict[str, str] = {}
    for name, value, bind in _endpoints(cfg):
        try:
            endpoints.parse(value, bind=bind)
        except endpoints.EndpointError as exc:
            raise refused(name, str(exc), value) from None
        if value in seen:
            raise refused(name, f"the same endpoint as {flag(seen[value])}", value)
        seen[value] = name
    if cfg.inline_shard and cfg.shards != 1:
        raise refused("inline_shard", "needs --shards 1", cfg.inline_shard)
    if cfg.encode and not cfg.encode_workers:
        raise refused("encode", "the encode service is off without --encode-workers N",
                      cfg.encode)
    if cfg.encode_workers and cfg.curve_keys and cfg.encode.startswith("tcp://"):
        raise refused("encode", "tcp:// with --curve-keys is not supported yet: the encode "
                      "service has no CURVE keys of its own; use an ipc:// endpoint", cfg.encode)
    if cfg.curve_keys:
        for name in ("service.key_secret", "frontend.key", "authorized-schedulers"):
            if not Path(cfg.curve_keys, name).exists():
                raise refused("curve_keys", f"missing {name}; make the directory with "
                              "`sglang-tok keygen DIR`", cfg.curve_keys)


def _check_cores(cfg: Config) -> None:
    """--cores names cores this process may use, enough for the egress and every shard."""
    if not cfg.cores:
        return
    try:
        cores = parse_cpu_list(cfg.cores)
    except ValueError as exc:
        raise refused("cores", str(exc), cfg.cores) from None
    usable = usable_cores()
    foreign = sorted(set(cores) - set(usable))
    if foreign:
        raise refused("cores", f"not usable here: {cpu_list_text(foreign)} (this process may "
                      f"run on {cpu_list_text(usable)})", cfg.cores)
    need = 1 if cfg.inline_shard else cfg.shards + 1
    if cfg.pin and len(cores) < need:
        raise refused("cores", f"{len(cores)} cores for the egress and "
                      f"{shards_text(cfg.shards)}: give at least {need}", cfg.cores)


def _make_runtime(cfg: Config, made: list[Path]) -> str:
    """The runtime directory, mode 0700 (ipc sockets live there: only the service's user
    may connect); what it had to create is appended to `made`."""
    if not cfg.runtime_dir:
        runtime = tempfile.mkdtemp(prefix="sglang-tok-")
        made.append(Path(runtime))
    else:
        runtime = cfg.runtime_dir
        # what a launcher wrote there for this service alone (its --sglang-layout) is its own
        own = {Path(cfg.sglang_layout)} if cfg.sglang_layout else set()
        if cfg.remove_runtime_dir and Path(runtime).is_dir() \
                and any(p not in own for p in Path(runtime).iterdir()):
            raise refused("remove_runtime_dir", "--runtime-dir is not empty; the service "
                          "removes only a directory that holds nothing but its own files",
                          runtime)
        try:
            made.extend(endpoints.make_dir(Path(runtime)))
        except endpoints.EndpointError as exc:
            raise refused("runtime_dir", str(exc), runtime) from None
        if cfg.remove_runtime_dir and Path(runtime) not in made:
            made.append(Path(runtime))  # discard() removes it, whatever is in it then
    os.chmod(runtime, 0o700)
    return runtime


def finalize(cfg: Config, made: list[Path] | None = None) -> Config:
    """Check every constraint, fill derived defaults (runtime dir, endpoints), make the
    directories ipc sockets need, and reject what cannot work; a Config built in code gets
    the same checks as the CLI's. Directories it creates are appended to `made` (for
    `discard`); on a refusal it removes them itself."""
    cfg = validate(msgspec.structs.asdict(cfg))
    _check_syntax(cfg)
    _check_cores(cfg)
    created: list[Path] = []
    runtime = cfg.runtime_dir
    try:
        runtime = _make_runtime(cfg, created)
        if len(f"ipc://{runtime}/shard-255.ipc") > 100:
            raise refused("runtime_dir", "too long for the ipc:// socket paths in it" + (
                "" if cfg.runtime_dir else " (a fresh one under TMPDIR); pass a shorter one"),
                runtime)
        for name, value, _ in _endpoints(cfg):
            ep = endpoints.parse(value, bind=False)
            if isinstance(ep, endpoints.Ipc):
                try:
                    dirs = endpoints.make_dirs(ep)
                except endpoints.EndpointError as exc:
                    raise refused(name, str(exc), value) from None
                created.extend(dirs)
                for d in dirs:
                    log.info("made directory %s (mode 0700) for %s %s", d, flag(name), value)
    except ConfigError:
        discard(created, runtime)
        raise
    if made is not None:
        made.extend(created)
    return msgspec.structs.replace(
        cfg, runtime_dir=runtime,
        encode=cfg.encode or (f"ipc://{runtime}/encode.ipc" if cfg.encode_workers else ""),
        input=cfg.input or f"ipc://{runtime}/input.ipc",
        output=cfg.output or f"ipc://{runtime}/output.ipc",
        model_name=cfg.model_name or cfg.tokenizer)


def check_binds(cfg: Config) -> None:
    """Bind and release every endpoint the service binds, and the HTTP port, so that a
    busy one is a refused flag before any process starts (a finalized Config)."""
    host, port = endpoints.parse_http(cfg.http)
    try:
        endpoints.check_http_free(host, port)
    except endpoints.EndpointError as exc:
        raise refused("http", str(exc), cfg.http) from None
    for name in ("egress-ctl.ipc", "back.ipc", "health.ipc"):
        if endpoints.listening(str(Path(cfg.runtime_dir, name))):
            raise refused("runtime_dir", "another sglang-tok serve is running there",
                          cfg.runtime_dir)
    for name, value, bind in _endpoints(cfg):
        if bind:
            try:
                endpoints.check_free(endpoints.parse(value, bind=True), value)
            except endpoints.EndpointError as exc:
                raise refused(name, str(exc), value) from None


@contextlib.contextmanager
def refusing(name: str, value: str) -> Iterator[None]:
    """A child's bind of a flag's endpoint that fails (taken since the supervisor checked
    it) is that flag refused, which the child reports (process.run_titled)."""
    try:
        yield
    except zmq.ZMQError as exc:
        raise refused(name, f"cannot bind: {exc.strerror}", value) from None
    except OSError as exc:
        raise refused(name, f"cannot listen: {exc.strerror}", value) from None


def discard(made: list[Path], runtime: str) -> None:
    """Remove what `finalize` made, innermost first: the runtime directory with whatever
    is left in it (a dead egress's journal), any other directory only when it is empty (a
    frontend's socket may be in it)."""
    for d in reversed(made):
        if d == Path(runtime):
            shutil.rmtree(d, ignore_errors=True)
        else:
            endpoints.remove_dirs([d])
