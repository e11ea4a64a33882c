"""The `sglang-tok` command line: serve, health, demo, keygen."""

from __future__ import annotations

import argparse
import json
import sys
import typing
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import msgspec

from sglang_tok.config import Config, ConfigError, default_shards, flag, validate
from sglang_tok.tokenizer import DEFAULT_TOKENIZER

# defaults that depend on the machine rather than on the Config
_MACHINE_DEFAULTS: dict[str, Callable[[], object]] = {"shards": default_shards}
_METAVARS: dict[object, str] = {int: "N", float: "SECONDS"}
_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _serve_epilog() -> str:
    from .arbiter import ExitCode
    codes = {
        ExitCode.OK: "stopped by SIGTERM or SIGINT, after the drain",
        ExitCode.RESTART_LIMIT: "a process died more than --restart-limit times within "
                                "--restart-window",
        ExitCode.CONFIG: "a flag's value or the tokenizer is unusable; nothing was started",
        ExitCode.BOOT_FAILURE: "boot failure: a process exited, or sent no heartbeat within "
                               "--boot-timeout, on its first start",
        ExitCode.FORCED: "a second SIGINT: stopped at once, without the drain",
    }
    return "exit codes:\n" + "\n".join(f"  {int(c):>3}  {text}" for c, text in codes.items())


def _field_flag(p: argparse.ArgumentParser, field: msgspec.structs.FieldInfo,
                hint: Any) -> None:
    """One `Config` field as one flag: type, choices, bounds and help from its annotation."""
    kind, meta = typing.get_args(hint)
    help_text = meta.description
    if kind is bool:  # `--no-pin` turns off a field that is on by default, and vice versa
        on = bool(field.default)
        p.add_argument(flag(("no_" if on else "") + field.name), dest=field.name,
                       action="store_false" if on else "store_true",
                       help=("do not " if on else "") + help_text)
        return
    default = _MACHINE_DEFAULTS.get(field.name, lambda: field.default)()
    notes = [f"{sign} {getattr(meta, key)}" for key, sign in _BOUNDS
             if getattr(meta, key) is not None]
    if default != "" and "(default" not in help_text:
        notes.append(f"default {default}")
    if notes:
        help_text += f" ({'; '.join(notes)})"
    choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
    p.add_argument(flag(field.name), type=str if choices else kind, choices=choices,
                   default=default, help=help_text, metavar=_METAVARS.get(kind))


def config_flags(p: argparse.ArgumentParser) -> None:
    """Every `Config` field, and nothing else, as a flag of `serve`."""
    hints = typing.get_type_hints(Config, include_extras=True)
    for field in msgspec.structs.fields(Config):
        _field_flag(p, field, hints[field.name])


def config_from(args: argparse.Namespace) -> Config:
    """The Config the flags describe; ConfigError names the flag whose value is refused."""
    return validate({f.name: getattr(args, f.name) for f in msgspec.structs.fields(Config)})


class _OneLine(argparse.ArgumentParser):
    """A subcommand whose mistakes are one line: `serve`'s usage alone is 30 lines, which
    bury the error under it."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The whole command line, and its `serve` subcommand (for errors naming a flag)."""
    top = argparse.ArgumentParser(prog="sglang-tok", description=__doc__)
    sub = top.add_subparsers(dest="cmd", required=True, parser_class=_OneLine)
    serve = sub.add_parser("serve", help="run the detokenizer service", epilog=_serve_epilog(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    config_flags(serve)
    h = sub.add_parser("health", help="probe a running service; exit 0 when healthy")
    h.add_argument("--http", default=Config().http, metavar="HOST:PORT",
                   help=f"the service's --http (default {Config().http})")
    h.add_argument("--deep", action="store_true",
                   help="also PING through the input ring and wait for every PONG")
    h.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for the answer (default 5)")
    kg = sub.add_parser("keygen", help="make a CURVE key directory for tcp:// endpoints")
    kg.add_argument("dir")
    dm = sub.add_parser("demo", help="start the service, stream verified requests through it")
    dm.add_argument("--requests", type=int, default=2000)
    dm.add_argument("--concurrency", type=int, default=256)
    dm.add_argument("--shards", type=int, default=0)
    dm.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    return top, serve


def main(argv: list[str] | None = None) -> int:
    top, serve_parser = parser()
    args = top.parse_args(argv)
    if args.cmd == "keygen":
        from sglang_tok.security import keygen
        for path in keygen(args.dir):
            print(path)
        return 0
    if args.cmd == "demo":
        from .demo import run
        return run(args.requests, args.concurrency, args.shards or None, args.tokenizer)
    if args.cmd == "health":
        return health(args.http, args.deep, args.timeout)
    from sglang_tok.own_packages import foreign_package

    from .arbiter import ExitCode
    why = foreign_package()  # before anything imports ring, egress or shards
    if why is not None:
        print(f"{serve_parser.prog}: error: {why}", file=sys.stderr)
        return ExitCode.CONFIG
    from .service import serve
    try:
        return serve(config_from(args))
    except ConfigError as exc:  # nothing was started, nothing is left on disk
        print(f"{serve_parser.prog}: error: {exc}", file=sys.stderr)
        return ExitCode.CONFIG


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
