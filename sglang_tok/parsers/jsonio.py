"""Strict JSON in and compact JSON out, with the decoder and encoder built once.

`json.loads(text, parse_constant=...)` and `json.dumps(obj, ensure_ascii=False)` build a
new decoder (its C scanner) or encoder on every call because of their keyword arguments;
that construction cost more than the parse itself for a call's arguments, paid at every
call's close. These are the same objects those calls build, so the results (and the
errors: every failure is a ValueError) are the same.
"""

from __future__ import annotations

import json
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
