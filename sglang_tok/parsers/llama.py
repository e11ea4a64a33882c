"""`llama3_json` (Llama 3.1-3.3): the call is a JSON object.

llama3_json: `{"name": ..., "parameters": {...}}` objects (`arguments` is read too), each
opened by `<|python_tag|>`, or with no opener at all at the start of the output or after
a call and a `;` separator (`{...}; {...}`). A call ends where its JSON object ends (there
is no end marker); text after it is content. The object is read as hermes' is
(`json_calls.HermesReader`): the model's own arguments JSON passes through.
Llama 4's `pythonic` format is in pythonic.py.
"""

from __future__ import annotations

from .json_calls import HermesReader, parse_hermes
from .json_readers import JsonValueEnd
from .tool_format import ToolFormat

PYTHON_TAG = "<|python_tag|>"


class ObjectEnd(JsonValueEnd):
    """The call is one JSON object; it ends where the object ends. A body whose first
    non-blank character is not `{` ends (malformed) at that character."""

    __slots__ = ()

    def _start(self, body: str) -> int:
        t = body.lstrip()
        if not t:
            return -1
        start = len(body) - len(t)
        return start if t[0] == "{" else -2 - start


def llama3_json() -> ToolFormat:
    return ToolFormat("llama3_json", PYTHON_TAG, ObjectEnd, parse_hermes, HermesReader,
                      unmarked="{", chain=";")
