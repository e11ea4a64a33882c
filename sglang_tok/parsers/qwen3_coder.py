"""qwen3_coder (Qwen3-Coder, Qwen3.5/3.6, Nemotron 3): the XML call format, schema-typed.

    <tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n...</function>\\n</tool_call>

Every value is text; its JSON type comes from the request's `tools` (`schema.convert`).
A value loses exactly one leading and one trailing newline (the template writes them;
SGLang's and vLLM's detectors strip the same). A value ends at `</parameter>`, or, as in
SGLang, at the next `<parameter=` or at `</function>` when the model left it unclosed.
Arguments are built by the shared reader of `xml_params` (string values stream as
generated; others leave when they close; both modes give the same bytes).
The model's reasoning parser is `qwen3`, which ends an open `<think>` at `<tool_call>`.
"""

from __future__ import annotations

import functools
import re

from .tool_format import CloseMarker, ToolFormat
from .xml_params import STRIP_ONE, XmlGrammar, XmlParamsReader, regex_head

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNC_END = "</function>"
PARAM_OPEN = "<parameter="
PARAM_END = "</parameter>"

GRAMMAR = XmlGrammar(
    head=regex_head(re.compile(r"\s*<function=([^>]+)>")),
    param=re.compile(r"\s*<parameter=([^>]+)>"),
    ends=[PARAM_END, PARAM_OPEN, FUNC_END], consume=PARAM_END, call_close=CALL_CLOSE,
    strip=STRIP_ONE, tail=re.compile(r"\s*</function>\s*"))


def qwen3_coder() -> ToolFormat:
    return ToolFormat("qwen3_coder", CALL_OPEN, lambda: CloseMarker(CALL_CLOSE), None,
                      functools.partial(XmlParamsReader, GRAMMAR),
                      inner=("<function=", FUNC_END, PARAM_OPEN, PARAM_END))
