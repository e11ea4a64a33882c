"""Clients of the encode service (`sglang-tok serve --encode-workers M --encode ENDPOINT`).

One DEALER socket each. Requests carry a counter as their `id`, so a reply is matched to
its request even after an earlier call timed out (its late reply is then skipped), and the
asyncio client can keep many requests in flight on one socket. See docs/protocol.md,
"Encode service".
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Literal, overload

import msgspec
import zmq
import zmq.asyncio

Ids = list[list[int]]
Offsets = list[list[tuple[int, int]]]


class EncodeError(RuntimeError):
    """The service answered with an error (a limit, a malformed request, a dead worker)."""


class _Reply(msgspec.Struct):
    id: int | float | str | bool | None = None
    ids: Ids | None = None
    offsets: Offsets | None = None
    error: str | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Reply)


def _request(rid: int, texts: list[str], add_special_tokens: bool, offsets: bool) -> bytes:
    return _encoder.encode({"id": rid, "texts": texts, "add_special_tokens": add_special_tokens,
                            "offsets": offsets})


def _result(reply: _Reply, offsets: bool) -> Ids | tuple[Ids, Offsets]:
    if reply.error is not None:
        raise EncodeError(reply.error)
    ids = reply.ids or []
    return (ids, reply.offsets or []) if offsets else ids


def _dealer(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


class EncodeClient:
    """Blocking client: one request at a time."""

    def __init__(self, endpoint: str, timeout: float = 30.0,
                 ctx: zmq.Context | None = None) -> None:
        self.timeout = timeout
        self.sock = _dealer(ctx or zmq.Context.instance(), endpoint)
        self.ids = itertools.count()

    @overload
    def encode(self, texts: list[str], add_special_tokens: bool = ...,
               offsets: Literal[False] = ...) -> Ids: ...

    @overload
    def encode(self, texts: list[str], add_special_tokens: bool = ...,
               *, offsets: Literal[True]) -> tuple[Ids, Offsets]: ...

    def encode(self, texts: list[str], add_special_tokens: bool = True,
               offsets: bool = False) -> Ids | tuple[Ids, Offsets]:
        """Ids per text (and character offsets per id, when asked); EncodeError on an
        error reply, TimeoutError when no reply comes within `timeout` seconds."""
        rid = next(self.ids)
        self.sock.send(_request(rid, texts, add_special_tokens, offsets))
        end = time.monotonic() + self.timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise TimeoutError(f"no encode reply within {self.timeout}s")
            reply = _decoder.decode(self.sock.recv())
            if reply.id == rid:  # else: the late reply of an earlier call that timed out
                return _result(reply, offsets)

    def close(self) -> None:
        self.sock.close()


class AsyncEncodeClient:
    """asyncio client: any number of concurrent `encode` calls on one socket."""

    def __init__(self, endpoint: str, timeout: float = 30.0,
                 ctx: zmq.asyncio.Context | None = None) -> None:
        self.timeout = timeout
        self.sock = (ctx or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.ids = itertools.count()
        self.waiting: dict[int, asyncio.Future[_Reply]] = {}
        self.reader: asyncio.Task[None] | None = None

    @overload
    async def encode(self, texts: list[str], add_special_tokens: bool = ...,
                     offsets: Literal[False] = ...) -> Ids: ...

    @overload
    async def encode(self, texts: list[str], add_special_tokens: bool = ...,
                     *, offsets: Literal[True]) -> tuple[Ids, Offsets]: ...

    async def encode(self, texts: list[str], add_special_tokens: bool = True,
                     offsets: bool = False) -> Ids | tuple[Ids, Offsets]:
        if self.reader is None:
            self.reader = asyncio.get_running_loop().create_task(self._read())
        rid = next(self.ids)
        fut = self.waiting[rid] = asyncio.get_running_loop().create_future()
        try:
            await self.sock.send(_request(rid, texts, add_special_tokens, offsets))
            reply = await asyncio.wait_for(fut, self.timeout)
        except TimeoutError:
            raise TimeoutError(f"no encode reply within {self.timeout}s") from None
        finally:
            self.waiting.pop(rid, None)
        return _result(reply, offsets)

    async def _read(self) -> None:
        while True:
            reply = _decoder.decode(await self.sock.recv())
            fut = self.waiting.get(reply.id) if isinstance(reply.id, int) else None
            if fut is not None and not fut.done():
                fut.set_result(reply)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
        self.sock.close()
