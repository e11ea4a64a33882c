"""minimax_m2 (MiniMax-M2): `<minimax:tool_call>` sections of `<invoke>` calls, schema-typed.

    <minimax:tool_call>
    <invoke name="NAME">
    <parameter name="P">VALUE</parameter>
    ...
    </invoke>
    </minimax:tool_call>

A section holds one or more invokes; whitespace between them is markup. A value ends at
`</parameter>` and loses its leading and trailing newlines (all of them, as SGLang's
detector strips them; other whitespace is kept). Values are typed by the request's
`tools` (`schema.convert`). The model's output starts inside its reasoning block (the
template opens `<think>`): pair it with reasoning `minimax`, which starts in the block.
"""

from __future__ import annotations

import functools
import re

from .tool_format import CloseMarker, ToolFormat
from .xml_params import STRIP_ALL, XmlGrammar, XmlParamsReader, regex_head

SECTION = ("<minimax:tool_call>", "</minimax:tool_call>")
CALL_OPEN, CALL_CLOSE = "<invoke", "</invoke>"
PARAM_OPEN, PARAM_CLOSE = "<parameter", "</parameter>"

GRAMMAR = XmlGrammar(
    head=regex_head(re.compile(r'\s+name="([^"<>]*)"\s*>')),
    param=re.compile(r'\s*<parameter\s+name="([^"<>]*)"\s*>'),
    ends=[PARAM_CLOSE], consume=PARAM_CLOSE, call_close=CALL_CLOSE, strip=STRIP_ALL,
    tail=re.compile(r"\s*"))


def minimax_m2() -> ToolFormat:
    return ToolFormat("minimax_m2", CALL_OPEN, lambda: CloseMarker(CALL_CLOSE), None,
                      functools.partial(XmlParamsReader, GRAMMAR), SECTION,
                      (PARAM_OPEN, PARAM_CLOSE))
