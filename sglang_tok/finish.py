"""How a request ended, as the scheduler says it (`finish_reasons`) and as the service says
it (a delta's `finish`): one of three msgspec structs tagged on `"type"`, SGLang's
`to_json` forms (docs/protocol.md section 3.4).

Decoded once where frames are read (BATCH's `finish_reasons`, SGLang's `finished_reasons`
for what the shard uses) and typed from there to `Delta.finish` and the COLUMNS/PACKED
`finish` column. A finish encodes exactly as the map it came as: msgspec writes the tag
first and the fields in declaration order, which is SGLang's key order, and every field
defaults to `UNSET`, so that a key that was absent stays absent and a present nil stays
present (`{"type": "abort"}`, the service's own, and SGLang's `{"type": "abort",
"message": ..., "status_code": null, "err_type": null}` are both an `Abort`). A key outside
these forms is not kept. `tool_calls` is the parsers' marker on a request's last finish
(section 8): `true`, or absent.
"""

from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType, convert, structs


class Stop(Struct, tag="stop", tag_field="type", frozen=True, repr_omit_defaults=True,
           gc=False):
    """A stop: the scheduler's stop token id (`matched` an int, or ids), a stop string
    (the scheduler's or the service's: a str), or (SGLang, a token it keeps) none."""

    matched: int | list[int] | str | UnsetType = UNSET
    tool_calls: bool | UnsetType = UNSET


class Length(Struct, tag="length", tag_field="type", frozen=True, repr_omit_defaults=True,
             gc=False):
    length: int | UnsetType = UNSET
    tool_calls: bool | UnsetType = UNSET


class Abort(Struct, tag="abort", tag_field="type", frozen=True, repr_omit_defaults=True,
            gc=False):
    """An abort: the scheduler's (SGLang's fields, each possibly nil) or the service's own
    (`ABORT`, no field: an ERROR, an ABORT, a refusal, a dropped frame)."""

    message: str | None | UnsetType = UNSET
    status_code: int | None | UnsetType = UNSET
    err_type: str | None | UnsetType = UNSET
    tool_calls: bool | UnsetType = UNSET


Finish = Stop | Length | Abort
FINISH_TYPES = frozenset(str(t.__struct_config__.tag) for t in (Stop, Length, Abort))
ABORT = Abort()  # the service's own abort: `{"type": "abort"}`


def stop_string(finish: Finish) -> str | None:
    """The stop string a stop matched (None: none, or not a stop)."""
    if type(finish) is Stop:
        matched = finish.matched
        return matched if type(matched) is str else None
    return None


def stop_token(finish: Finish | None, last: int) -> bool:
    """Whether `last`, a row's last id, is the stop token a stop matched (`matched` that id,
    or ids holding it)."""
    if type(finish) is not Stop:
        return False
    matched = finish.matched
    if type(matched) is int:
        return matched == last
    return type(matched) is list and last in matched


def with_tool_calls(finish: Finish) -> Finish:
    """The finish of a request that ended with tool calls delivered (section 8)."""
    return structs.replace(finish, tool_calls=True)


def finish_of(value: object) -> Finish:
    """A finish from its plain form (a map, as `msgspec.to_builtins` gives it back);
    raise `msgspec.ValidationError` for one outside the forms."""
    return convert(value, Finish)  # type: ignore[arg-type]
