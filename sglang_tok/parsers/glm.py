"""glm45 (GLM-4.5/4.6) and glm47 (GLM-4.7, GLM-5): `<arg_key>`/`<arg_value>` calls, schema-typed.

    glm45:  <tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n...</tool_call>
    glm47:  <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>

One grammar reads both (as vLLM's parser does): the name is the text before the first
newline or `<arg_key>` (whitespace and a literal `\\n` around it dropped), or the whole
body of a call without parameters (`<tool_call>NAME</tool_call>`); between parameters
and after the last one, whitespace and literal `\\n` (models sometimes write the escape,
SGLang accepts it) are markup. A value is kept exactly, whitespace included (SGLang and
vLLM do not strip GLM values; it may be file content), and ends at `</arg_value>`.
Values are typed by the request's `tools` (`schema.convert`); a non-string value that is
not JSON but is once unescaped as JSON string content (`[{\\"id\\": 1}]`) is taken that
way, as SGLang does. The models' reasoning parser is `glm45` (`<think>`, ended by
`</think>` or by `<tool_call>`, as `qwen3`).
"""

from __future__ import annotations

import functools
import json
import re

from .schema import convert
from .tool_format import CloseMarker, ToolFormat
from .xml_params import STRIP_NONE, XmlGrammar, XmlParamsReader

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
_SEP = r"(?:\s|\\n)*"  # whitespace or a literal \n
_NAME_TAIL = re.compile(_SEP + r"$")
_LEAD = re.compile(r"\s*")
_NAME = re.compile(r"[^\s<>]+")


def _name(text: str) -> str:
    """A name with its trailing separators dropped; "" when it is not a name."""
    name = _NAME_TAIL.sub("", text, count=1)
    return name if _NAME.fullmatch(name) else ""


def _head(body: str, ready: int) -> tuple[str, int] | None:
    j = _LEAD.match(body, 0, ready).end()  # type: ignore[union-attr]
    nl = body.find("\n", j, ready)
    key = body.find(KEY_OPEN, j, nl if nl >= 0 else ready)
    end = key if key >= 0 else nl
    if end < 0:
        return None  # the name may still grow (or the call ends with it: `bare_name`)
    return _name(body[j:end]), end


def _bare_name(body: str) -> str | None:
    return _name(body.strip()) or None


def _convert(text: str, types: tuple[str, ...]) -> str:
    out = convert(text, types)
    if out.startswith('"') and "\\" in text:  # not converted: maybe escaped JSON
        try:
            unescaped = json.loads('"' + text.strip() + '"')
        except ValueError:
            return out
        again = convert(unescaped, types)
        if not again.startswith('"'):
            return again
    return out


GRAMMAR = XmlGrammar(
    head=_head,
    param=re.compile(_SEP + re.escape(KEY_OPEN) + r"(.*?)" + re.escape(KEY_CLOSE) + _SEP
                     + re.escape(VALUE_OPEN), re.DOTALL),
    ends=[VALUE_CLOSE], consume=VALUE_CLOSE, call_close=CALL_CLOSE, strip=STRIP_NONE,
    tail=re.compile(_SEP), fast_stops=">\n", bare_name=_bare_name, convert=_convert)


def glm(name: str) -> ToolFormat:
    return ToolFormat(name, CALL_OPEN, lambda: CloseMarker(CALL_CLOSE), None,
                      functools.partial(XmlParamsReader, GRAMMAR),
                      inner=(KEY_OPEN, KEY_CLOSE, VALUE_OPEN, VALUE_CLOSE))
