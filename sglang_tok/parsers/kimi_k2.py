"""kimi_k2 (Kimi-K2, Kimi-K2-Thinking): sections of calls with JSON arguments and call ids.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>
    {"k": "v"}<|tool_call_end|>...<|tool_calls_section_end|>

The id `functions.NAME:IDX` (whitespace around it ignored; the `functions.` prefix is
optional, as vLLM reads it) names the call: NAME is what lies between the prefix and the
last `:`, and the whole id reaches the client as the call's `id` (OpenAI's
`tool_calls[].id`, which Kimi's chat template echoes back in the tool result). An id that
is not of that form (SGLang's tests feed `weird@id` and bare counters such as `0`) makes
the call malformed: it is text, as every malformed call is. The arguments are the model's
own JSON object, passed through as in the other JSON formats (`json_readers.RawArgs`); nothing
after `<|tool_call_argument_begin|>` but whitespace gives `{}`.
The reasoning parser `kimi_k2` is `<think>` ... `</think>` that the section-begin marker
also ends (Kimi-K2-Thinking opens a section without closing its block).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .json_readers import ObjectArgs, object_arguments
from .readers import Call, Calls, Event, HeadFirst, Opened
from .schema import Schemas
from .tool_format import CloseMarker, ToolFormat

SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
CALL_OPEN, CALL_CLOSE = "<|tool_call_begin|>", "<|tool_call_end|>"
ARG = "<|tool_call_argument_begin|>"
_ID = re.compile(r"(?:functions\.)?([\w.\-]+):\d+")
_CALL = re.compile(r"\s*(\S*?)\s*" + re.escape(ARG) + r"\s*(.*?)\s*", re.DOTALL)


def call_name(call_id: str) -> str | None:
    m = _ID.fullmatch(call_id)
    return None if m is None else m.group(1)


def parse_kimi(body: str) -> Calls | None:
    m = _CALL.fullmatch(body)
    if m is None:
        return None
    call_id = m.group(1)
    name = call_name(call_id)
    text = None if name is None else object_arguments(m.group(2))
    return None if name is None or text is None else [Call(name, text, call_id)]


class KimiReader(HeadFirst[ObjectArgs]):
    """`functions.NAME:IDX` up to the argument marker (then the name and id leave), then
    the JSON object, streamed as written with its closing brace held to the call's end."""

    __slots__ = ()

    def __init__(self, schemas: Schemas | None = None) -> None:
        super().__init__()  # `args`: once the argument marker is seen

    def _head(self, body: str, ready: int, out: list[Event]) -> ObjectArgs | None:
        at = body.find(ARG, 0, ready)
        if at < 0:
            return None
        call_id = body[:at].strip()
        name = call_name(call_id)
        if name is None:
            self.bad = True
            return None
        out.append(Opened(name, call_id))
        return ObjectArgs(at + len(ARG))

    def _more(self, args: ObjectArgs, body: str, ready: int, out: list[Event]) -> None:
        args.read(body, ready, out)

    def close(self, body: str) -> list[Event] | None:
        return None if self.bad or self.args is None else self.args.close(body)

    piece_fast = True  # `fast` is `RawArgs.fast`: its own state and the piece

    def fast_now(self) -> Callable[[int, str], str | None] | None:
        """`fast` until the next `read`: the arguments object's, once it started (what
        `read` gives for the piece: `ObjectArgs.read` of a started object is its
        `RawArgs.read`)."""
        return None if self.args is None else self.args.fast_now()


def kimi_k2() -> ToolFormat:
    return ToolFormat("kimi_k2", CALL_OPEN, lambda: CloseMarker(CALL_CLOSE), parse_kimi,
                      KimiReader, SECTION, (ARG,))
