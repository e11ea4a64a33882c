"""Strict JSON in and compact JSON out, with the decoder and encoder built once.

`json.loads(text, parse_constant=...)` and `json.dumps(obj, ensure_ascii=False)` build a
new decoder (its C scanner) or encoder on every call because of their keyword arguments;
that construction cost more than the parse itself for a call's arguments, paid at every
call's close. These are the same objects those calls build, so the results (and the
errors: every failure is a ValueError) are the same. A string (`json_string`) or a piece
of one (`escape`) goes straight to the C encoder's string escaping, for the same reason.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any


def _reject_constant(value: str) -> Any:
    raise ValueError(f"not JSON: {value}")


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
_COMPACT = json.JSONEncoder(ensure_ascii=False)
_FINITE = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def loads(text: str) -> Any:
    """Strict JSON: NaN and Infinity are not JSON (ValueError), as
    `json.loads(text, parse_constant=...)` (a BOM is a ValueError too)."""
    return _STRICT.decode(text)


def dumps(obj: Any) -> str:
    """`json.dumps(obj, ensure_ascii=False)`."""
    return _COMPACT.encode(obj)  # type: ignore[no-any-return]


def dumps_finite(obj: Any) -> str:
    """`json.dumps(obj, ensure_ascii=False, allow_nan=False)`: NaN and infinities are a
    ValueError."""
    return _FINITE.encode(obj)  # type: ignore[no-any-return]


def json_string(text: str) -> str:
    """`json.dumps(text, ensure_ascii=False)` (what it calls for a str), without `dumps`'
    per-call overhead (an encoder built per call)."""
    return encode_basestring(text)  # type: ignore[no-any-return]


def escape(text: str) -> str:
    """A piece of a JSON string's content: escaping is per character, so pieces concatenate
    to the escaping of the whole; the same bytes as `json.dumps(text, ensure_ascii=False)`
    (non-ASCII kept), by json's C encoder without `dumps`' per-call overhead."""
    return encode_basestring(text)[1:-1]
