"""A release's own `BatchTokenIDOutput`, built by field name from the stand-in's columns.

SGLang changes this class in almost every release (42 fields in 0.5.12-0.5.13 with `load`
and required `spec_*` lists in the middle, 44 in 0.5.14-0.5.15, 49 in 0.5.16, 52 in
0.5.17-0.5.18, 54 in 0.5.19-0.5.20, 53 in 0.5.21-0.5.23), so the stand-in never assumes an
order or a set: `FieldMap` maps the columns it makes (`step_columns.COLUMNS`, by SGLang's
names) onto the running release's fields once, at start. A field of the release that the stand-in
does not make is filled as that release's scheduler fills it (`FILLS`, or a fill the
process hands in), else left at its class default; a field the release requires (no
default) that nothing fills is a refusal, in one line, before the first request. A column
the release has no field for is left out (a release before beam search has no
`beam_search_output`).

`Fields` is what the stand-in reads of a layout (`protocols/sglang/layouts/*.json`, or a
trace's `sglang_layout`): the release, its IPC and its `BatchTokenIDOutput` field names.
Nothing here imports SGLang.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import msgspec

from sglang_tok.protocols.sglang.layout import LAST_TESTED, known, known_releases
from sglang_tok.protocols.sglang.wire import encode_message

from .step_columns import COLUMNS

TAG = "BatchTokenIDOutput"
Fill = Callable[[Mapping[str, Any]], Any]


def _nil(cols: Mapping[str, Any]) -> Any:
    return None


# fields some release has that the stand-in makes no column for, each as that release's
# scheduler fills it for a batch that asks for none of it; `load` (0.5.12-0.5.13: the
# scheduler's loads, read by a DP TokenizerManager) is replaced by one SGLang builds where
# the process can (main.py)
FILLS: dict[str, Fill] = {
    "output_token_sampling_logprobs": _nil,  # 0.5.16-0.5.20: only with sampling masks
    "token_steps": _nil,
    "load": _nil,
}


class Fields(msgspec.Struct, frozen=True, kw_only=True):
    """What the stand-in reads of a release's layout (the JSON of `layout.Layout`; other
    keys are ignored)."""

    release: str = "unknown"
    ipc: str = "msgpack"  # "msgpack" (0.5.15 on) or "pickle" (0.5.12-0.5.14)
    token_ids: tuple[str, ...]


_fields_decoder = msgspec.json.Decoder(Fields)


def fields_of(layout: Any) -> Fields:
    """A layout as JSON (bytes, str) or as its builtins (a trace's `sglang_layout`)."""
    if isinstance(layout, bytes | str):
        return _fields_decoder.decode(layout)
    return msgspec.convert(layout, Fields)


def known_fields(release: str = LAST_TESTED) -> Fields:
    """A tested release's fields, from the layouts kept with the service."""
    return fields_of(msgspec.to_builtins(known(release)))


class FieldMap:
    """The stand-in's columns onto one release's `BatchTokenIDOutput`, by name.

    `fields`: the class's fields in order; `required`: those without a default (where a
    field_map is made without the class, every field: the strictest reading); `fills`: more
    fills than `FILLS` (or replacements); `convert`: per field, what turns the stand-in's
    column into this release's value (a list where it keeps ids in lists, a pickle
    wrapper where it wraps)."""

    def __init__(self, release: str, fields: Sequence[str], required: Collection[str] | None,
                 fills: Mapping[str, Fill] | None = None,
                 convert: Mapping[str, Callable[[Any], Any]] | None = None) -> None:
        self.release = release
        self.fields = tuple(fields)
        required = frozenset(self.fields if required is None else required)
        made = frozenset(COLUMNS)
        every_fill = {**FILLS, **(fills or {})}
        conv = dict(convert or {})
        # the fields taken from a column (with its conversion), filled, left at default
        self.taken: list[tuple[str, Callable[[Any], Any] | None]] = [
            (name, conv.get(name)) for name in self.fields if name in made]
        self.filled: list[tuple[str, Fill]] = [
            (name, every_fill[name]) for name in self.fields
            if name not in made and name in every_fill]
        self.defaulted = tuple(name for name in self.fields if name not in made
                               and name not in every_fill and name not in required)
        self.missing = tuple(name for name in self.fields if name not in made
                             and name not in every_fill and name in required)
        self.dropped = tuple(name for name in COLUMNS if name not in self.fields)

    def refusal(self, lacking: str = "which the stand-in does not make") -> str | None:
        """Why the stand-in cannot send this release's message, in one line."""
        if not self.missing:
            return None
        return (f"the sglang-tok stand-in cannot be SGLang {self.release}'s scheduler: its "
                f"{TAG} requires {', '.join(self.missing)}, {lacking}")

    def kwargs(self, cols: Mapping[str, Any]) -> dict[str, Any]:
        """The release's fields by name, for its class (`cls(**kwargs)`)."""
        out: dict[str, Any] = {}
        for name, conv in self.taken:
            value = cols[name]
            out[name] = conv(value) if conv is not None and value is not None else value
        for name, fill in self.filled:
            out[name] = fill(cols)
        return out


def encode(kwargs: Mapping[str, Any], fields: Sequence[str], tag: str = TAG) -> bytes:
    """A message in msgpack IPC form (0.5.15 on) without SGLang (tests, tools): the tag,
    then every field in the release's order, a field not given as nil (SGLang's encoder
    writes its default, nil for every field `FieldMap` leaves at its default here)."""
    return encode_message(tag, [kwargs.get(name) for name in fields])


__all__ = ["FILLS", "LAST_TESTED", "TAG", "Fields", "FieldMap", "encode", "fields_of",
           "known_fields", "known_releases"]
