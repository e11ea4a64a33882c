"""The one place ZeroMQ sockets are made: type, bind or connect, high-water marks, linger.

High-water marks are the service's capacity: when one is reached a send blocks, so
overload becomes backpressure on the scheduler instead of a silent drop. Linger is
bounded so shutdown always ends, after giving queued messages time to leave.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import zmq

from sglang_tok.security import Curve

LINGER_MS = 5000


def make_socket(ctx: zmq.Context, kind: int, endpoint: str, *, bind: bool, hwm: int,
                linger_ms: int = LINGER_MS, max_msg_bytes: int = -1,
                curve: Curve | None = None, rcvtimeo_ms: int = -1,
                sndtimeo_ms: int = -1) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    if max_msg_bytes > 0:
        # enforced by libzmq while reading the wire: an oversized frame is never buffered
        sock.setsockopt(zmq.MAXMSGSIZE, max_msg_bytes)
    if rcvtimeo_ms >= 0:
        sock.setsockopt(zmq.RCVTIMEO, rcvtimeo_ms)
    if sndtimeo_ms >= 0:
        sock.setsockopt(zmq.SNDTIMEO, sndtimeo_ms)
    if endpoint.startswith("tcp://["):  # an IPv6 address: libzmq takes it only when told
        sock.setsockopt(zmq.IPV6, 1)
    if curve is not None and endpoint.startswith("tcp://"):
        sock.curve_publickey = curve.public
        sock.curve_secretkey = curve.secret
        if bind:
            sock.curve_server = True
        else:
            sock.curve_serverkey = curve.server_public
    if bind:
        if endpoint.startswith("ipc://"):
            path = Path(endpoint[len("ipc://"):])
            if path.exists() or path.is_symlink():
                path.unlink()  # a stale socket from a killed process
        sock.bind(endpoint)
        if endpoint.startswith("ipc://"):
            os.chmod(endpoint[len("ipc://"):], 0o600)
    else:
        sock.connect(endpoint)
    return sock


class PushTo:
    """PUSH sockets to endpoints a message names at run time (SGLang's tokenizer workers,
    each a `http_worker_ipcs` entry), connected on first use; None is the default one."""

    def __init__(self, ctx: zmq.Context, default: zmq.Socket, hwm: int) -> None:
        self.ctx = ctx
        self.hwm = hwm
        self.sockets: dict[str | None, zmq.Socket] = {None: default}

    def __getitem__(self, endpoint: str | None) -> zmq.Socket:
        sock = self.sockets.get(endpoint)
        if sock is None:
            assert endpoint is not None
            sock = self.sockets[endpoint] = make_socket(self.ctx, zmq.PUSH, endpoint,
                                                        bind=False, hwm=self.hwm)
        return sock

    def close(self, linger: int | None = None) -> None:
        """Every socket but the default, which its owner closes (None: each socket's own
        linger)."""
        for endpoint, sock in self.sockets.items():
            if endpoint is not None:
                sock.close(linger=linger)


class BoundFile:
    """The socket file an ipc:// bind made, to remove once the socket is closed: libzmq
    leaves it, and a directory holding it cannot be removed. Only that file goes, not one
    a later bind of the same path put there (a frontend bound again where one closed)."""

    def __init__(self, endpoint: str) -> None:
        self.path = ""
        self.ident: tuple[int, int] | None = None
        if endpoint.startswith("ipc://") and not endpoint.startswith("ipc://@"):
            self.path = endpoint[len("ipc://"):]
            self.ident = _ident(self.path)

    def remove(self) -> None:
        if self.ident is not None and _ident(self.path) == self.ident:
            Path(self.path).unlink(missing_ok=True)
        self.ident = None


def _ident(path: str) -> tuple[int, int] | None:
    """The socket file's (device, inode); None when no socket is there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None
