"""The stand-in's one module that touches pickles (the service has its own:
`protocols/sglang/pickled.py`; nothing else in sglang_tok may).

- SGLang 0.5.12-0.5.14 speak pickles between their processes (`send_pyobj`/`recv_pyobj`;
  0.5.15 on msgpack through io_struct's `sock_send`/`sock_recv`). The stand-in is SGLang's
  scheduler there: started by SGLang's own launcher, in SGLang's own process tree, on the
  ipc:// sockets SGLang's launcher made for its scheduler, it receives what SGLang's
  TokenizerManager sends and sends what SGLang's detokenizer reads, as SGLang's scheduler
  does (`send`, `recv`). It is never part of `sglang-tok serve`.
- A trace recorded on 0.5.12-0.5.14 holds those pickles. `load_record` reads one without
  SGLang and without running anything: SGLang's classes become inert records (`Record`),
  nothing but `array` loads besides, and any other global refuses the frame.
"""

from __future__ import annotations

import io
import pickle
from typing import Any


def send(sock: Any, obj: Any) -> None:
    """SGLang 0.5.12-0.5.14's scheduler -> detokenizer / TokenizerManager IPC."""
    sock.send_pyobj(obj)


def recv(sock: Any, flags: int = 0) -> Any:
    """What SGLang 0.5.12-0.5.14's TokenizerManager sends its scheduler."""
    return sock.recv_pyobj(flags)


class Record:
    """An SGLang object of a pickled trace: its state, and nothing it could run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        parts = state if isinstance(state, tuple) else (state,)
        for part in parts:  # (dict, slots) for a class with __slots__
            if isinstance(part, dict):
                self.__dict__.update(part)


_records: dict[tuple[str, str], type] = {}
# the globals other than SGLang's a scheduler message's pickle holds
_SAFE = frozenset([("array", "array"), ("array", "_array_reconstructor"),
                   ("copyreg", "_reconstructor"), ("builtins", "object"),
                   ("builtins", "set"), ("builtins", "frozenset"),
                   ("collections", "OrderedDict")])


class _Unpickler(pickle.Unpickler):
    """Loads SGLang's classes as `Record`s and nothing but `array` besides."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE:
            return super().find_class(module, name)
        if module == "sglang" or module.startswith("sglang."):
            key = (module, name)
            if key not in _records:
                _records[key] = type(name, (Record,), {"__module__": module})
            return _records[key]
        raise pickle.UnpicklingError(f"{module}.{name} is not loaded from a trace")


def load_record(frame: bytes | memoryview) -> Any:
    """One pickled frame of a trace (a `Record` for an SGLang object); raises for a frame
    that is not one or names anything else."""
    return _Unpickler(io.BytesIO(bytes(frame))).load()


__all__ = ["Record", "load_record", "recv", "send"]
