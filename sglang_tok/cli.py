"""The `sglang-tok` command line: serve, health, demo, keygen."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

from .config import Config, ConfigError, default_shards
from .tokenizer import DEFAULT_TOKENIZER


def _serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="run the detokenizer service")
    d = Config()
    p.add_argument("--tokenizer", default=DEFAULT_TOKENIZER,
                   help="built-in name (deepseek-v4), a tokenizer.json, or a directory")
    p.add_argument("--shards", type=int, default=default_shards(),
                   help="decoder processes (default: usable cores minus one, at least 1)")
    p.add_argument("--input", default="", help="input ring endpoint the service binds "
                   "(default ipc://RUNTIME/input.ipc)")
    p.add_argument("--output", default="", help="frontend endpoint the service connects to "
                   "(default ipc://RUNTIME/output.ipc)")
    p.add_argument("--http", default=d.http, help="HOST:PORT for /health and /metrics")
    p.add_argument("--runtime-dir", default="", help="where ipc sockets live (mode 0700)")
    p.add_argument("--ring-capacity", type=int, default=d.ring_capacity,
                   help="input ring high-water mark, in frames")
    p.add_argument("--link-capacity", type=int, default=d.link_capacity,
                   help="high-water mark of internal links and the output, in messages")
    p.add_argument("--max-frame-bytes", type=int, default=d.max_frame_bytes)
    p.add_argument("--max-rid-length", type=int, default=d.max_rid_length)
    p.add_argument("--max-row-ids", type=int, default=d.max_row_ids)
    p.add_argument("--max-requests", type=int, default=d.max_requests,
                   help="live requests per shard; new rids beyond it get an error")
    p.add_argument("--ended-memory", type=int, default=d.ended_memory,
                   help="ended rids remembered per shard, to ignore their late rows")
    p.add_argument("--max-stops", type=int, default=d.max_stops)
    p.add_argument("--max-stop-length", type=int, default=d.max_stop_length)
    p.add_argument("--model-name", default="", help="model_name metric label")
    p.add_argument("--engine", default=d.engine, help="engine metric label")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin cores")
    p.add_argument("--drain-timeout", type=float, default=d.drain_timeout)
    p.add_argument("--heartbeat-timeout", type=float, default=d.heartbeat_timeout)
    p.add_argument("--restart-grace", type=float, default=d.restart_grace,
                   help="seconds after an egress restart during which unknown rids fail")
    p.add_argument("--curve-keys", default="", help="directory from `sglang-tok keygen`: "
                   "CURVE authentication and encryption on tcp:// endpoints")
    p.add_argument("--log-level", default=d.log_level)
    p.add_argument("--output-format", choices=("deltas", "columnar"), default=d.output_format,
                   help="frames to the frontend: DELTAS maps or COLUMNS (protocol 5.1)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglang-tok", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    _serve_parser(sub)
    h = sub.add_parser("health", help="probe a running service; exit 0 when healthy")
    h.add_argument("--http", default=Config().http)
    h.add_argument("--deep", action="store_true",
                   help="also PING through the input ring and wait for every PONG")
    h.add_argument("--timeout", type=float, default=5.0)
    kg = sub.add_parser("keygen", help="make a CURVE key directory for tcp:// endpoints")
    kg.add_argument("dir")
    dm = sub.add_parser("demo", help="start the service, stream verified requests through it")
    dm.add_argument("--requests", type=int, default=2000)
    dm.add_argument("--concurrency", type=int, default=256)
    dm.add_argument("--shards", type=int, default=0)
    dm.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    args = parser.parse_args(argv)
    if args.cmd == "keygen":
        from .security import keygen
        for path in keygen(args.dir):
            print(path)
        return 0
    if args.cmd == "demo":
        from .demo import run
        return run(args.requests, args.concurrency, args.shards or None, args.tokenizer)
    if args.cmd == "serve":
        from .supervisor import serve
        fields = {k: v for k, v in vars(args).items() if k != "cmd"}
        fields["runtime_dir"] = fields.pop("runtime_dir")
        try:
            return serve(Config(**fields))
        except ConfigError as exc:
            print(f"sglang-tok: {exc}", file=sys.stderr)
            return 2
    if args.cmd == "health":
        return health(args.http, args.deep, args.timeout)
    return 2


def health(http: str, deep: bool, timeout: float) -> int:
    url = f"http://{http}/health" + ("?deep=1" if deep else "")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read().decode()
            code = resp.status
    except urllib.error.HTTPError as exc:
        body, code = exc.read().decode(), exc.code
    except (urllib.error.URLError, OSError) as exc:
        print(json.dumps({"status": "unreachable", "error": str(exc)}))
        return 1
    print(body)
    return 0 if code == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
