"""Tool calls written as a model in each XML-style format writes them.

The simulated scheduler (examples/sim_scheduler.py) streams them as model output and the
parser tests generate their inputs with them, so both write a format's call by the same
rule; each adds what its context puts around a call (a leading newline, a section).
"""

from __future__ import annotations

import json
from typing import Any


def xml_value(v: Any) -> str:
    """A parameter's value as these formats write it: a string as is, anything else JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def qwen3_coder_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{xml_value(v)}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def glm_call(fmt: str, name: str, args: dict[str, Any]) -> str:
    """glm45 puts a newline after the name and after each value; glm47 does not."""
    sep = "\n" if fmt == "glm45" else ""
    params = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>{xml_value(v)}</arg_value>{sep}"
                     for k, v in args.items())
    return f"<tool_call>{name}{sep}{params}</tool_call>"


def minimax_invoke(name: str, args: dict[str, Any]) -> str:
    params = "".join(f'<parameter name="{k}">{xml_value(v)}</parameter>\n'
                     for k, v in args.items())
    return f'<invoke name="{name}">\n{params}</invoke>'
