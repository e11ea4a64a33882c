import os
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))


def _load_builtins_once() -> None:
    """A built-in tokenizer is loaded and described once per test session, not by every
    module and test that asks (a second of CPU each): what `load` gives is never changed
    by its callers. Paths are loaded as asked (a test may write another file there).
    Patched before any test module imports `load`."""
    from sglang_tok import tokenizer

    real = tokenizer.load
    loaded: dict[str, Any] = {}

    def load(name_or_path: str) -> Any:
        if name_or_path not in tokenizer.BUILTIN:
            return real(name_or_path)
        if name_or_path not in loaded:
            loaded[name_or_path] = real(name_or_path)
        return loaded[name_or_path]

    load.__doc__ = real.__doc__
    tokenizer.load = load


_load_builtins_once()


# A suite started from a shell without job control (a background job, some CI runners)
# inherits SIGINT ignored, and every process a test starts would too: the tests that stop
# a launcher or a server with SIGINT, as a user's ^C does, would then wait for nothing.
signal.signal(signal.SIGINT, signal.default_int_handler)
