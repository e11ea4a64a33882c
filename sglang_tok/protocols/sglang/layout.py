"""The running SGLang's message layout, read by field name, never assumed.

SGLang changes its scheduler -> detokenizer -> TokenizerManager classes in almost every
release (`BatchTokenIDOutput` has 42 fields in 0.5.12, 54 in 0.5.19, 53 in 0.5.23, some
moved to the middle), and msgpack's `array_like` form carries no names: a message read with
another release's field order is misread without an error. So the plugin reads the running
release's own classes (`read_running`, inside SGLang's launcher), writes the `Layout` into
the service's runtime directory, and every process builds its plans by name from it once
(`plans.py`): the per-message path costs what it did with a fixed order.

How SGLang's detokenizer fills each `BatchStrOutput` field (`carry`) is read from its own
source (`DetokenizerManager.handle_batch_token_id_out`, the one call that builds the reply):
a field passed on from the scheduler's field of a name, the texts, a column of tensors sent
as base64, None, or a field left at its class default. A release whose classes lack what the
service reads, or whose detokenizer fills a field in a way not known here, is refused
(`refusal`): a wrong answer is worse than SGLang's own detokenizer.

Releases 0.5.12-0.5.14 send pickled dataclasses over ipc:// (`ipc == "pickle"`); 0.5.15 on,
msgspec structs as msgpack. The layouts of the releases this project was tested against are
kept in `layouts/` (`known`), for a service started without SGLang and for traces recorded
on one release and replayed on another.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import logging
import re
import sys
import textwrap
from importlib import resources
from typing import Any

import msgspec

log = logging.getLogger("sglang_tok.sglang")

# the range of SGLang releases with plugin hooks this project is tested against
FIRST_SERVED = "0.5.12"
LAST_TESTED = "0.5.23"
RANGE = f"{FIRST_SERVED}-{LAST_TESTED}"
# the columns of a BatchTokenIDOutput the service reads, and the fields of a BatchStrOutput
# its own last rows fill (a dead shard's requests, a dropped message's)
READ = ("rids", "http_worker_ipcs", "finished_reasons", "decoded_texts", "decode_ids",
        "read_offsets", "output_ids", "skip_special_tokens", "spaces_between_special_tokens",
        "no_stop_trim", "prompt_tokens", "reasoning_tokens", "completion_tokens",
        "cached_tokens")
WRITTEN = ("rids", "http_worker_ipcs", "finished_reasons", "output_strs", "output_ids",
           "prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens")
# the columns SGLang's detokenizer sends on as base64 of each row's tensor
B64 = frozenset(("routed_experts", "indexer_topk"))
# what SGLang wraps as a pickle inside a msgpack message (`PickleWrapper`): a column of
# every row that is cut per row only by unpickling it; in a pickle-IPC release the same
# fields hold the objects themselves
PICKLED = ("customized_info", "time_stats")
# how a BatchStrOutput field is filled: the texts, None, the class default, the scheduler's
# field NAME ("=NAME"), or its tensors as base64 ("b64=NAME")
TEXTS, NIL, DEFAULT = "texts", "nil", "default"


class Layout(msgspec.Struct, frozen=True, kw_only=True):
    """One SGLang release's messages, by field name (each tuple in declaration order, the
    msgpack order)."""

    release: str
    ipc: str  # "msgpack" or "pickle"
    token_ids: tuple[str, ...]  # BatchTokenIDOutput
    str_output: tuple[str, ...]  # BatchStrOutput
    carry: tuple[str, ...]  # per str_output field: how SGLang's detokenizer fills it
    # the str_output fields left at their class default, with that default
    defaults: dict[str, Any] = {}
    pickled: tuple[str, ...] = ()  # token_ids fields that are one pickle of every row
    embedding: tuple[str, ...] = ()  # BatchEmbeddingOutput
    configure_logging: tuple[str, ...] = ()  # ConfigureLoggingReq
    beam_output: tuple[str, ...] = ()  # BeamSearchOutput (empty: no beam search)
    # where the carry was read: SGLang's detokenizer source, or the name rule alone
    read_from: str = "source"
    # how an `array` (decode_ids, output_ids) travels: msgpack ext type 1 (0.5.19 on, and
    # the form the service reads a pickle-IPC release's into), or SGLang 0.5.15-0.5.18's
    # `[typecode, bytes]` pair (their msgpack encoder's hook)
    arrays: str = "ext"
    # the release's `DetokenizerManager.trim_matched_stop`: with no_stop_trim, a matched stop
    # string stays and what follows it is cut ("through", 0.5.14 on) or the whole text
    # stays ("whole", 0.5.12-0.5.13); a matched stop id 0 is trimmed (0.5.21 on: `matched
    # is None`) or, falsy, kept (before: `if not matched`)
    kept_stop_str: str = "through"
    stop_id_zero_trimmed: bool = True

    def refusal(self) -> str | None:
        """Why this release cannot be served, in one line; None when it can."""
        head = f"sglang-tok does not serve SGLang {self.release}"
        served = f"(served: {RANGE}, by field name)"
        if self.ipc not in ("msgpack", "pickle"):
            return f"{head}: its IPC is {self.ipc!r} {served}"
        if self.arrays not in ("ext", "pair"):
            return f"{head}: it sends arrays as {self.arrays} {served}"
        if self.kept_stop_str not in ("through", "whole"):
            return (f"{head}: its detokenizer trims a kept stop string as "
                    f"{self.kept_stop_str!r} {served}")
        missing = [f for f in READ if f not in self.token_ids]
        if missing:
            return (f"{head}: its BatchTokenIDOutput has no {', '.join(missing)} {served}")
        missing = [f for f in WRITTEN if f not in self.str_output]
        if missing:
            return f"{head}: its BatchStrOutput has no {', '.join(missing)} {served}"
        for name, how in zip(self.str_output, self.carry):
            if how == DEFAULT and name not in self.defaults:
                return (f"{head}: its detokenizer leaves BatchStrOutput.{name} unset and it has "
                        f"no default {served}")
            source = how.partition("=")[2]
            if how.startswith("?") or (source and source not in self.token_ids):
                return (f"{head}: its detokenizer fills BatchStrOutput.{name} as "
                        f"`{how.lstrip('?')}`, which sglang-tok does not know {served}")
        return None

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    @staticmethod
    def from_json(data: bytes | str) -> Layout:
        return msgspec.json.decode(data, type=Layout)


# --------------------------------------------------------------------------- known layouts
def known(release: str) -> Layout:
    """A release's layout as read from it when this project was tested against it."""
    data = resources.files(__package__).joinpath("layouts", f"{release}.json").read_bytes()
    return Layout.from_json(data)


def known_releases() -> list[str]:
    folder = resources.files(__package__).joinpath("layouts")
    names = [p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")]
    return sorted(names, key=release_key)


def release_key(release: str) -> tuple[int, ...]:
    """'0.5.9' < '0.5.23' (and '0.5.23.post1' after '0.5.23')."""
    out: list[int] = []
    for part in release.replace("post", "").split("."):
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def builtin() -> Layout:
    """The layout a service started without one reads (the newest release tested)."""
    return known(LAST_TESTED)


# --------------------------------------------------------------------------- read from SGLang
def read_running() -> Layout:
    """The running SGLang's layout, read from its own classes and its detokenizer's source.
    Imports SGLang: only in a process SGLang started (the plugin's launcher hook)."""
    import sglang
    from sglang.srt.managers import io_struct as io

    release = str(getattr(sglang, "__version__", "unknown"))
    token_cls, str_cls = io.BatchTokenIDOutput, io.BatchStrOutput
    ipc = "msgpack" if issubclass(token_cls, msgspec.Struct) else "pickle"
    token_ids, str_output = field_names(token_cls), field_names(str_cls)
    trim = ("through", True)  # the newest rules, where the source cannot say
    try:
        from sglang.srt.managers.detokenizer_manager import DetokenizerManager

        kwargs = reply_kwargs(inspect.getsource(DetokenizerManager.handle_batch_token_id_out))
        read_from = "source"
        trim = trim_rules(inspect.getsource(DetokenizerManager.trim_matched_stop))
    except (ImportError, OSError, TypeError, ValueError, SyntaxError, AttributeError) as exc:
        log.warning("sglang_tok: SGLang %s's detokenizer source is not readable (%s): its "
                    "replies are filled by field name alone", release, exc)
        kwargs, read_from = None, "names"
    carry = carry_of(str_output, token_ids, kwargs)
    defaults = {name: default_of(str_cls, name) for name, how in zip(str_output, carry)
                if how == DEFAULT and has_default(str_cls, name)}
    pickled = tuple(f for f in token_ids if _is_pickled(token_cls, f, ipc))
    beam = getattr(io, "BeamSearchOutput", None)
    arrays = _array_form(io) if ipc == "msgpack" else "ext"
    return Layout(release=release, ipc=ipc, token_ids=token_ids, str_output=str_output,
                  carry=carry, defaults=defaults, pickled=pickled,
                  embedding=field_names(io.BatchEmbeddingOutput),
                  configure_logging=field_names(io.ConfigureLoggingReq),
                  beam_output=field_names(beam) if beam is not None else (),
                  read_from=read_from, arrays=arrays, kept_stop_str=trim[0],
                  stop_id_zero_trimmed=trim[1])


def trim_rules(source: str) -> tuple[str, bool]:
    """(kept_stop_str, stop_id_zero_trimmed) as a release's `trim_matched_stop` source
    says: 0.5.12-0.5.13 return the whole output under no_stop_trim (`if no_stop_trim or
    not finished_reason`), 0.5.14 on cut after the stop string (`output[:end] if
    no_stop_trim`); before 0.5.21 `if not matched` keeps a stop id 0, then `matched is
    None` trims it. A source of neither form is a rule the service does not know (the
    layout is then refused, not guessed)."""
    code = re.sub(r"\s+", "", source)
    if "output[:end]ifno_stop_trim" in code:
        kept = "through"
    elif "ifno_stop_trimornotfinished_reason" in code:
        kept = "whole"
    else:
        kept = "?"
    return kept, "ifmatchedisNone" in code


def _array_form(io: Any) -> str:
    """How the running release's own msgpack encoder writes an `array.array`."""
    from array import array

    encoder = getattr(io, "_msgpack_encoder", None)
    if encoder is None:
        return "unknown"
    head = encoder.encode(array("q", [1]))[0]
    if head in (0xC7, 0xC8, 0xC9) or 0xD4 <= head <= 0xD8:  # an ext
        return "ext"
    return "pair" if head == 0x92 else f"msgpack type 0x{head:02x}"


def field_names(cls: type) -> tuple[str, ...]:
    """A message class's fields in declaration order: a msgspec struct's (its msgpack
    order) or a dataclass's (pickle IPC: by name)."""
    if issubclass(cls, msgspec.Struct):
        return tuple(cls.__struct_fields__)
    return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]


def has_default(cls: type, name: str) -> bool:
    try:
        default_of(cls, name)
    except LookupError:
        return False
    return True


def default_of(cls: type, name: str) -> Any:
    """A field's class default (LookupError: it has none, or not one msgpack can carry)."""
    if issubclass(cls, msgspec.Struct):
        info = {f.name: f for f in msgspec.structs.fields(cls)}[name]
        if info.default is not msgspec.NODEFAULT:
            value = info.default
        elif info.default_factory is not msgspec.NODEFAULT:
            value = info.default_factory()
        else:
            raise LookupError(name)
    else:
        field = {f.name: f for f in dataclasses.fields(cls)}[name]  # type: ignore[arg-type]
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            raise LookupError(name)
    try:
        msgspec.msgpack.encode(value)
    except TypeError:
        raise LookupError(name) from None
    return value


def _is_pickled(cls: type, name: str, ipc: str) -> bool:
    if ipc == "pickle":
        return name in PICKLED  # the objects SGLang wraps from 0.5.15 on, by name
    info = {f.name: f for f in msgspec.structs.fields(cls)}[name]
    return "PickleWrapper" in repr(info.type)


def reply_kwargs(source: str) -> dict[str, str]:
    """The `BatchStrOutput(...)` call in SGLang's `handle_batch_token_id_out`: each keyword
    as "=NAME" (the received message's field NAME), "b64=NAME" (its tensors in base64),
    TEXTS, NIL, or "?CODE" (an expression not known here)."""
    tree = ast.parse(textwrap.dedent(source))
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise ValueError("not a function")
    recv = func.args.args[1].arg if len(func.args.args) > 1 else "recv_obj"
    assigned: dict[str, ast.expr] = {}
    call: ast.Call | None = None
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "BatchStrOutput":
            call = node
    if call is None:
        raise ValueError("no BatchStrOutput(...) call")
    out: dict[str, str] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise ValueError("a **kwargs reply")
        value = kw.value
        if isinstance(value, ast.Name) and value.id in assigned:
            value = assigned[value.id]
        out[kw.arg] = _how(kw.arg, value, recv)
    return out


def _how(name: str, value: ast.expr, recv: str) -> str:
    if isinstance(value, ast.Constant) and value.value is None:
        return NIL
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) \
            and value.value.id == recv:
        return "=" + value.attr
    calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute)]
    if name == "output_strs" and any("decode" in c.func.attr for c in calls):  # type: ignore[attr-defined]
        return TEXTS
    for c in calls:
        if "b64" in c.func.attr and len(c.args) == 1:  # type: ignore[attr-defined]
            arg = c.args[0]
            if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) \
                    and arg.value.id == recv:
                return "b64=" + arg.attr
    return "?" + ast.unparse(value)[:60]


def carry_of(str_output: tuple[str, ...], token_ids: tuple[str, ...],
             kwargs: dict[str, str] | None) -> tuple[str, ...]:
    """How each reply field is filled: as SGLang's detokenizer source says (`kwargs`; a
    field it does not set keeps its default), or, without the source, by name: the texts,
    the scheduler's field of the same name (base64 for the tensor columns), None for the
    placeholder columns SGLang's detokenizer always sends as None, else the default."""
    if kwargs is not None:
        return tuple(kwargs.get(name, DEFAULT) for name in str_output)
    out = []
    for name in str_output:
        if name == "output_strs":
            out.append(TEXTS)
        elif name.startswith("placeholder_tokens_"):
            out.append(NIL)
        elif name in token_ids:
            out.append(("b64=" if name in B64 else "=") + name)
        else:
            out.append(DEFAULT)
    return tuple(out)


@functools.cache
def load(value: str) -> Layout:
    """`--sglang-layout`: a tested release's name, a layout file, or "" (the newest tested);
    loaded once per process. ValueError says what is wrong."""
    if not value:
        return builtin()
    if value in known_releases():
        return known(value)
    try:
        return read(value)
    except OSError as exc:
        raise ValueError(f"{exc.strerror}: {value}") from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"not a layout file: {value} ({exc})") from None


def write(layout: Layout, path: str) -> None:
    with open(path, "wb") as f:
        f.write(layout.to_json())


def read(path: str) -> Layout:
    with open(path, "rb") as f:
        return Layout.from_json(f.read())


def describe(layout: Layout) -> str:
    """One line for SGLang's log."""
    return (f"SGLang {layout.release}, {layout.ipc} IPC, BatchTokenIDOutput "
            f"{len(layout.token_ids)} fields, BatchStrOutput {len(layout.str_output)} "
            f"(read by name from its {'source' if layout.read_from == 'source' else 'classes'})")


def dump_running() -> None:
    """Print the running release's layout as JSON (how `layouts/` is made)."""
    print(json.dumps(msgspec.to_builtins(read_running()), indent=1))


def trim_rules_in_words(layout: Layout) -> str:
    """The release's `trim_matched_stop` as its layout read it, in words."""
    kept = ("the whole text" if layout.kept_stop_str == "whole" else
            "the text through the stop string" if layout.kept_stop_str == "through" else
            repr(layout.kept_stop_str))
    zero = "trimmed" if layout.stop_id_zero_trimmed else "kept (a falsy match)"
    return f"no_stop_trim with a matched stop string: {kept}; a matched stop id 0: {zero}"


def main(argv: list[str] | None = None) -> int:
    """`python -m sglang_tok.protocols.sglang.layout`: in an SGLang environment, print the
    running release's layout as JSON; with `--describe`, anywhere, say what the service
    makes of a stored one (the steps of docs/recipes.md)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sglang_tok.protocols.sglang.layout",
                                 description=main.__doc__)
    ap.add_argument("--describe", metavar="RELEASE_OR_FILE",
                    help="a tested release's name or a layout file: its fields, its trim "
                         "rules, and whether the service serves it (exit 1 if not)")
    args = ap.parse_args(argv)
    if args.describe is None:
        dump_running()
        return 0
    try:
        layout = load(args.describe)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(describe(layout))
    print(trim_rules_in_words(layout))
    why = layout.refusal()
    print(why or f"served (the tested releases: {', '.join(known_releases())})")
    return 0 if why is None else 1


if __name__ == "__main__":
    sys.exit(main())
