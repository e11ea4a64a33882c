"""Pickles from SGLang, in the one module of the service that unpickles, and only what
SGLang's own scheduler sent in SGLang's own process tree (callers pass `per_row` or build
a pickle-IPC reader only where `config.from_sglang` says so: an ipc:// input as SGLang's
launcher makes it, or the tcp:// one its single-node launcher makes for DP attention);
from any other peer nothing is unpickled. SGLang itself unpickles every message it receives.

- SGLang's pickled columns (`time_stats`, `customized_info`: `["PickleWrapper", bytes]`),
  cut per row where a message's rows go to several shards or tokenizer workers, as SGLang's
  own per-worker split does (`_extract_field_by_indices`: unwrap, take the rows, wrap);
  from another peer a part carries these columns as nil.
- Releases 0.5.12-0.5.14 send every message pickled (`send_pyobj`): `from_pickle` turns one
  into the msgpack form the reader reads (the same fields by name, each `array` an ext, a
  tensor an ext, the time stats and any other object a `PickleWrapper`), and
  `PickleReplies` turns a reply back into that release's own message, pickled.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import threading
from array import array
from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import Raw

from sglang_tok.protocols.sglang import wire
from sglang_tok.protocols.sglang.layout import Layout

log = logging.getLogger("sglang_tok.sglang")
_encoder = msgspec.msgpack.Encoder()


class PickleWrapper(msgspec.Struct, tag=True, array_like=True):
    """SGLang's `PickleWrapper`: a field of Python objects, pickled, in a msgpack message."""

    data: bytes


_wrapper_decoder = msgspec.msgpack.Decoder(PickleWrapper)
_unpickle_failed = False


# set while preload_sglang's import runs (a process that never asked unpickles as is)
_loading: threading.Event | None = None


def preload_sglang() -> threading.Thread:
    """Import SGLang's message classes in the background, in a process that may cut
    pickled columns: the first unpickle of SGLang's time stats imports half of SGLang and
    torch (seconds on a busy host), which must neither hold up a restarted egress (every
    stream waits for it) nor happen inside its loop. Until it is done, a cut sends these
    columns as nil. Where SGLang is not installed its pickles will not load either way."""

    global _loading
    done = _loading = threading.Event()

    def load() -> None:
        try:
            import sglang.srt.managers.io_struct
            import sglang.srt.observability.req_time_stats  # noqa: F401
        except ImportError:
            pass
        finally:
            done.set()

    thread = threading.Thread(target=load, name="sglang-tok preload", daemon=True)
    thread.start()
    return thread


def cut_rows(field: Raw | bytes, parts: list[list[int]]) -> list[bytes] | None:
    """A pickled column (`time_stats`, a list per row; `customized_info`, per key a list
    per row) cut per part as SGLang's own router cuts it: unpickled once, each part's rows
    pickled again, each part's field as msgpack. Only for a message from SGLang's own
    process tree (the caller's to know), and only where `pickle_rows` cannot cut it without
    unpickling; None where it will not unpickle (the parts then carry nil)."""
    global _unpickle_failed
    if _loading is not None and not _loading.is_set():
        return None  # SGLang still loading (preload_sglang): nil this once
    try:
        whole = pickle.loads(_wrapper_decoder.decode(field).data)
    except Exception:  # SGLang's classes not importable here, or not a wrapper
        if not _unpickle_failed:
            _unpickle_failed = True
            log.warning("a pickled column will not unpickle here; it goes as nil",
                        exc_info=True)
        return None
    out = []
    for rows in parts:
        if isinstance(whole, dict):
            sub: Any = {key: [values[r] for r in rows] for key, values in whole.items()}
        else:
            sub = [whole[r] for r in rows]
        out.append(_encoder.encode(PickleWrapper(pickle.dumps(sub))))
    return out


# --------------------------------------------------------------------------- pickle IPC
def from_pickle(frame: bytes | memoryview, layout: Layout) -> bytes:
    """A pickled SGLang message (0.5.12-0.5.14) in the msgpack form of its release's fields
    (`Layout`): [class name, every field in order]. SGLang's own process tree only."""
    obj = pickle.loads(frame)
    name = type(obj).__name__
    if name == "BatchTokenIDOutput":
        names: Sequence[str] = layout.token_ids
    elif name == "BatchEmbeddingOutput":
        names = layout.embedding
    elif dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
    else:
        raise ValueError(f"a pickled {name}, not one of SGLang's messages")
    wrapped = frozenset(layout.pickled)
    return _encoder.encode([name, *(_field(getattr(obj, f, None), f in wrapped)
                                    for f in names)])


def _field(value: Any, wrap: bool) -> Any:
    if value is None:
        return None
    if not wrap and not hasattr(value, "__dict__"):  # an object is pickled whole
        try:
            return Raw(_plain.encode(value))
        except TypeError:  # an object msgpack does not carry: as SGLang 0.5.15 on wraps it
            pass
    return PickleWrapper(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def _as_ext(obj: Any) -> Any:
    """What SGLang's msgpack encoder makes of an array, a tensor, a numpy array."""
    if isinstance(obj, array):
        return wire.array_ext(obj, obj.typecode)
    if hasattr(obj, "numpy") and hasattr(obj, "shape"):  # a torch tensor
        host = obj.detach().cpu()
        meta = [list(host.shape), str(host.dtype).removeprefix("torch."), "cpu"]
        return wire.buffer_ext(wire.EXT_TORCH, meta, host.numpy().tobytes())
    if hasattr(obj, "__array_interface__") and hasattr(obj, "dtype"):  # numpy
        return wire.buffer_ext(wire.EXT_NUMPY, [list(obj.shape), obj.dtype.str], obj.tobytes())
    raise TypeError(type(obj).__name__)


_plain = msgspec.msgpack.Encoder(enc_hook=_as_ext)


def _from_ext(code: int, data: memoryview) -> Any:
    meta, raw = wire.buffer_payload(data)
    if code == wire.EXT_ARRAY:
        out = array(meta)
        out.frombytes(raw)
        return out
    import numpy as np

    if code == wire.EXT_NUMPY:
        return np.frombuffer(bytes(raw), meta[1]).reshape(meta[0])
    if code == wire.EXT_TORCH:
        import torch

        dtype = getattr(torch, meta[1])
        if not len(raw):
            return torch.empty(meta[0], dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(meta[0])
    raise ValueError(f"msgpack ext {code}")


_objects = msgspec.msgpack.Decoder(ext_hook=_from_ext)


class PickleReplies:
    """Replies as a pickle-IPC release's TokenizerManager reads them: its own message class
    of each reply's name (SGLang's `io_struct`, imported here at start), pickled."""

    def __init__(self, layout: Layout) -> None:
        from sglang.srt.managers import io_struct

        self.io = io_struct
        self.names = {"BatchStrOutput": layout.str_output,
                      "BatchEmbeddingOutput": layout.embedding}

    def __call__(self, msg: bytes) -> bytes:
        fields = _objects.decode(msg)
        name, values = fields[0], fields[1:]
        cls = getattr(self.io, name)
        names = self.names.get(name) or [f.name for f in dataclasses.fields(cls)]
        kwargs = {f: _unwrapped(v) for f, v in zip(names, values)}
        return pickle.dumps(cls(**kwargs), pickle.HIGHEST_PROTOCOL)


def _unwrapped(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2 and value[0] == "PickleWrapper" \
            and isinstance(value[1], bytes):
        return pickle.loads(value[1])
    return value

