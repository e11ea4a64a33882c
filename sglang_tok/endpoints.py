"""Endpoint values (`--input`, `--output`, `--encode`, `--http`) checked before anything runs.

libzmq refuses a bad endpoint only inside the child that binds or connects it (a traceback
there, then a boot failure naming no flag), and accepts some it can never reach (a connect
to port 70000 retries forever). So each value is parsed here first, with no side effects
(`parse`, `parse_http`); then missing ipc directories are made (`make_dirs`, mode 0700 as
the runtime directory is), and each endpoint the service binds is bound once and released
(`check_free`, `check_http_free`), so that a busy port is a refused flag and not a crashed
child. This module knows no flag names: an `EndpointError` says what is wrong, and the
caller says which flag (config.py).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
import stat
from pathlib import Path

import msgspec
import zmq

IPC_PATH_MAX = 107  # bytes of sockaddr_un.sun_path, less its NUL
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_SCHEMES = ("ipc://", "tcp://")


class EndpointError(ValueError):
    """What is wrong with an endpoint, in words; the caller names the flag."""


class Tcp(msgspec.Struct, frozen=True):
    host: str  # "*", an IPv4 address, "[IPv6]", a host or interface name
    port: int


class Ipc(msgspec.Struct, frozen=True):
    path: str  # "@name": Linux's abstract namespace, no file

    @property
    def abstract(self) -> bool:
        return self.path.startswith("@")


Endpoint = Tcp | Ipc


def parse(value: str, *, bind: bool) -> Endpoint:
    """The endpoint a ZeroMQ `bind` (or `connect`) of the service would get, checked."""
    if value.startswith("inproc://"):
        raise EndpointError("inproc:// reaches only sockets of the same process, and the "
                            "service's processes are separate; use ipc:// or tcp://")
    if not value.startswith(_SCHEMES):
        scheme, sep, _ = value.partition("://")
        if sep:
            raise EndpointError(f"{scheme}:// is not supported; use ipc://PATH or "
                                "tcp://HOST:PORT")
        hint = ""
        if re.fullmatch(r"[^/:]+:\d+", value):
            hint = f"; did you mean tcp://{value}?"
        elif value.startswith("/"):
            hint = f"; did you mean ipc://{value}?"
        raise EndpointError(f"not an endpoint: expected ipc://PATH or tcp://HOST:PORT{hint}")
    if value.startswith("ipc://"):
        return _ipc(value[len("ipc://"):])
    return _tcp(value[len("tcp://"):], bind)


def _ipc(path: str) -> Ipc:
    if not path:
        raise EndpointError("empty ipc:// path")
    if path == "*":
        raise EndpointError("ipc://* makes a random path no peer can know; give a path")
    size = len(path.encode())
    if size > IPC_PATH_MAX:
        raise EndpointError(f"the ipc path is {size} bytes, longer than the {IPC_PATH_MAX} a "
                            "Unix socket address holds; use a shorter path")
    if path.endswith("/"):
        raise EndpointError("the ipc path names a directory; name a socket file in it")
    return Ipc(path)


def _tcp(rest: str, bind: bool) -> Tcp:
    if not bind and ";" in rest:  # libzmq's SOURCE;HOST:PORT form of connect
        rest = rest.split(";", 1)[1]
    host, sep, port_text = rest.rpartition(":")
    if not sep or not host:
        raise EndpointError("expected tcp://HOST:PORT")
    port = _port(port_text, allow_zero=False)
    if host == "*":
        if not bind:
            raise EndpointError("* is for binding; name the host to connect to")
    else:
        _host(host)
    return Tcp(host, port)


def _port(text: str, *, allow_zero: bool) -> int:
    if text in ("*", "!") or (text == "0" and not allow_zero):
        raise EndpointError("a random port is one no peer can know; give a port number")
    if not text.isdigit():
        raise EndpointError(f"port {text!r} is not a number")
    port = int(text)
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise EndpointError(f"port {port} is out of range (1-65535)")
    return port


def _host(host: str) -> None:
    if host.startswith("["):
        if not host.endswith("]"):
            raise EndpointError(f"{host!r}: an IPv6 address needs its closing ]")
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise EndpointError(f"{host!r} is not an IPv6 address") from None
        return
    if ":" in host:
        raise EndpointError(f"{host!r}: an IPv6 address goes in brackets, e.g. [::1]")
    if re.fullmatch(r"[\d.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise EndpointError(f"{host!r} is not an IPv4 address") from None
        return
    if not _HOSTNAME.match(host):
        raise EndpointError(f"{host!r} is not a host name or address")


def parse_http(value: str) -> tuple[str, int]:
    """(host, port) of the HTTP listener; port 0 asks for any free port."""
    if "://" in value:
        raise EndpointError("expected HOST:PORT, without a scheme")
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise EndpointError("expected HOST:PORT, e.g. 127.0.0.1:8399 (0.0.0.0 for every "
                            "interface; port 0 for any free one)")
    port = _port(port_text, allow_zero=True)
    _host(host)
    return host.strip("[]"), port


# ---------------------------------------------------------------------- on this machine
def make_dirs(ep: Ipc) -> list[Path]:
    """Make the socket's missing directories, mode 0700; return them, outermost first.

    A path that is there but is no socket (nor an empty placeholder file) is refused:
    binding would replace it (the service clears a stale socket file before it binds)."""
    if ep.abstract:
        return []
    path = Path(ep.path)
    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # make_dir says which
        pass
    except OSError as exc:
        raise EndpointError(f"cannot look at {path}: {exc.strerror}") from None
    else:
        if stat.S_ISDIR(mode):
            raise EndpointError(f"{path} is a directory; name a socket file in it")
        # an empty file is a placeholder, not data: SGLang reserves its ipc names with
        # tempfile.NamedTemporaryFile(delete=False) and binds over them
        placeholder = stat.S_ISREG(mode) and path.lstat().st_size == 0
        if not stat.S_ISSOCK(mode) and not placeholder:
            raise EndpointError(f"{path} exists and is not a socket; refusing to replace it")
    return make_dir(path.parent)


def make_dir(path: Path) -> list[Path]:
    """Make a directory and its missing parents, each mode 0700; return what was made,
    outermost first."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    if not path.is_dir():
        raise EndpointError(f"{path} is not a directory")
    made: list[Path] = []
    try:
        for d in reversed(missing):
            os.mkdir(d, 0o700)
            made.append(d)
            os.chmod(d, 0o700)  # whatever the umask: ipc sockets are only for this user
    except OSError as exc:
        remove_dirs(made)
        raise EndpointError(f"cannot create directory {exc.filename}: {exc.strerror}") from None
    return made


def remove_dirs(made: list[Path]) -> None:
    """Remove directories `make_dirs` made, innermost first, each only if it is empty
    (a frontend may have bound its socket in one)."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:
            pass


def listening(path: str) -> bool:
    """Some process accepts connections on this Unix socket (a stale file refuses them)."""
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(address)
        except OSError:
            return False
    return True


_BIND_ERRORS = {
    errno.EADDRINUSE: "the address is in use (another sglang-tok serve?)",
    errno.ENODEV: "no interface or local address of this machine has that name",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's",
    errno.EACCES: "permission denied",
}


def check_free(ep: Endpoint, value: str) -> None:
    """Bind `value` once and release it; EndpointError says why it cannot be bound."""
    if isinstance(ep, Ipc) and listening(ep.path):
        raise EndpointError("another process is listening on that socket (a service "
                            "already running?)")
    ctx = zmq.Context(io_threads=1)
    sock = ctx.socket(zmq.PULL)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        if isinstance(ep, Tcp) and ep.host.startswith("["):
            sock.setsockopt(zmq.IPV6, 1)
        sock.bind(value)
    except zmq.ZMQError as exc:
        why = _BIND_ERRORS.get(exc.errno or 0) or exc.strerror
        raise EndpointError(f"cannot bind: {why}") from None
    finally:
        sock.close(0)
        ctx.term()  # joins libzmq's threads: the listener is closed when this returns
    if isinstance(ep, Ipc):
        remove_stale(ep.path)  # libzmq leaves the file; it was missing or stale before


def remove_stale(path: str) -> None:
    """Unlink a socket file no process listens on any more (libzmq leaves them)."""
    if path.startswith("@") or listening(path):
        return
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def check_http_free(host: str, port: int) -> None:
    """Bind every address the HTTP process will listen on, as asyncio does, and release."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise EndpointError(f"cannot resolve {host!r}: {exc.strerror}") from None
    for family, kind, proto, _, address in dict.fromkeys(infos):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                why = _BIND_ERRORS.get(exc.errno or 0) or exc.strerror or str(exc)
                if exc.errno == errno.EADDRINUSE:
                    why = (f"port {port} is in use on {host} (another sglang-tok serve?); "
                           "pass another port, or port 0 for any free one")
                raise EndpointError(f"cannot listen: {why}") from None
