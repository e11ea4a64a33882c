"""SGLang's pickled columns (`time_stats`, `customized_info`: `["PickleWrapper", bytes]`),
cut per row where a message's rows go to several shards or tokenizer workers, as SGLang's
own per-worker split does (`_extract_field_by_indices`: unwrap, take the rows, wrap).

The one place in the service that unpickles, and only what SGLang's own scheduler sent in
SGLang's own process tree: callers pass `per_row` from `config.from_sglang` (the input an
ipc:// socket, as SGLang's launcher makes it); from a tcp:// peer nothing is unpickled and
a part carries these columns as nil. SGLang itself unpickles every message it receives.
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import Raw

from sglang_tok.protocols.sglang import wire

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


def cut_pickled(columns: Sequence[Any], parts: list[list[int]], out: list[list[Raw]],
                pickled: frozenset[int]) -> None:
    """The pickled columns (`time_stats`, a list per row; `customized_info`, per key a list
    per row) cut per part as SGLang's own scheduler would have wrapped each part's rows:
    unpickled once, each part's rows pickled again. Only for a message from SGLang's own
    process tree (the caller's to know); a column that will not unpickle stays nil."""
    global _unpickle_failed
    if _loading is not None and not _loading.is_set():
        return  # SGLang still loading (preload_sglang): nil this once
    for i in pickled:
        col = columns[i]
        if col is None or col == wire.NIL:
            continue
        try:
            whole = pickle.loads(_wrapper_decoder.decode(col).data)
        except Exception:  # SGLang's classes not importable here, or not a wrapper
            if not _unpickle_failed:
                _unpickle_failed = True
                log.warning("a pickled column (%s) will not unpickle here; it goes as nil",
                            wire.PASSED_FIELDS[i], exc_info=True)
            continue
        for part, rows in zip(out, parts):
            if isinstance(whole, dict):
                sub: Any = {key: [values[r] for r in rows] for key, values in whole.items()}
            else:
                sub = [whole[r] for r in rows]
            part[i] = Raw(_encoder.encode(PickleWrapper(pickle.dumps(sub))))


