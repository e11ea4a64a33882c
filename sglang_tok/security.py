"""Who may connect: ZeroMQ CURVE for tcp:// endpoints, from a directory of keys.

ipc:// endpoints live in a runtime directory only the service's user can enter, so they
need no keys. Across hosts, `--curve-keys DIR` encrypts and authenticates both ends:

    DIR/service.key, service.key_secret       the service's key pair
    DIR/scheduler.key, scheduler.key_secret   for schedulers (hand this pair to them)
    DIR/frontend.key, frontend.key_secret     for the frontend
    DIR/authorized-schedulers/*.key           public keys allowed to push into the ring
    DIR/authorized-service/*.key              public keys a frontend accepts deltas from

`sglang-tok keygen DIR` makes all of it. A peer whose public key is not authorised
fails the handshake: it can neither push a frame nor read a delta.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

SCHEDULERS = "authorized-schedulers"
SERVICE = "authorized-service"


@dataclass(frozen=True)
class Curve:
    """CURVE keys for tcp:// endpoints: this side's key pair and, for servers, the
    directory of authorised client public keys; for clients, the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes = b""


def keygen(directory: str) -> list[str]:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    made = []
    for name in ("service", "scheduler", "frontend"):
        pub, secret = zmq.auth.create_certificates(str(d), name)
        os.chmod(secret, 0o600)
        made.append(pub)
    for sub, names in ((SCHEDULERS, ("scheduler", "service")), (SERVICE, ("service",))):
        (d / sub).mkdir(exist_ok=True)
        for name in names:  # the service itself pushes health probes into its own ring
            shutil.copy(d / f"{name}.key", d / sub / f"{name}.key")
    return made


def _pair(directory: str, name: str) -> tuple[bytes, bytes]:
    pub, secret = zmq.auth.load_certificate(str(Path(directory) / f"{name}.key_secret"))
    assert secret is not None
    return pub, secret


def _public(directory: str, name: str) -> bytes:
    return zmq.auth.load_certificate(str(Path(directory) / f"{name}.key"))[0]


def service_server(directory: str) -> Curve:
    """The input ring's side: the service's keys."""
    pub, secret = _pair(directory, "service")
    return Curve(pub, secret)


def service_client(directory: str) -> Curve:
    """The service connecting out to the frontend (and into its own ring, for probes)."""
    pub, secret = _pair(directory, "service")
    return Curve(pub, secret, _public(directory, "frontend"))


def service_probe(directory: str) -> Curve:
    pub, secret = _pair(directory, "service")
    return Curve(pub, secret, pub)


def scheduler_client(directory: str) -> Curve:
    pub, secret = _pair(directory, "scheduler")
    return Curve(pub, secret, _public(directory, "service"))


def frontend_server(directory: str) -> Curve:
    pub, secret = _pair(directory, "frontend")
    return Curve(pub, secret)


def authenticator(ctx: zmq.Context, directory: str, allowed: str) -> ThreadAuthenticator:
    """Start ZAP in this process: only public keys in DIR/<allowed> pass the handshake."""
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(Path(directory) / allowed))
    return auth
