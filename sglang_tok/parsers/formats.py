"""The tool-call formats by name: a new format is a module of this package plus one line here.

`REASONING_OF` records the reasoning parser each format's models pair with (what a
frontend selects when only the tool parser is named; SGLang's names).
"""

from __future__ import annotations

from .dsml import dsml
from .glm import glm
from .harmony import gpt_oss
from .json_calls import deepseekv3, hermes, mistral
from .kimi_k2 import kimi_k2
from .llama import llama3_json
from .minimax import minimax_m2
from .pythonic import pythonic
from .qwen3_coder import qwen3_coder
from .tool_format import ToolFormat

FORMATS: dict[str, ToolFormat] = {
    "deepseekv4": dsml("deepseekv4", "tool_calls"),
    "deepseekv32": dsml("deepseekv32", "function_calls"),
    "deepseekv3": deepseekv3(),
    "hermes": hermes(),
    "mistral": mistral(),
    "qwen3_coder": qwen3_coder(),
    "glm45": glm("glm45"),
    "glm47": glm("glm47"),
    "minimax_m2": minimax_m2(),
    "kimi_k2": kimi_k2(),
    "gpt-oss": gpt_oss(),  # its own framing (harmony.HarmonyParser), reasoning included
    "llama3_json": llama3_json(),
    "pythonic": pythonic(),
}
FORMATS["deepseekv31"] = FORMATS["deepseekv3"]
FORMATS["qwen25"] = FORMATS["qwen"] = FORMATS["hermes"]

REASONING_OF: dict[str, str] = {
    "deepseekv4": "deepseek-r1", "deepseekv32": "deepseek-r1", "deepseekv31": "deepseek-r1",
    "deepseekv3": "deepseek-r1", "qwen25": "qwen3", "qwen": "qwen3", "hermes": "qwen3",
    "qwen3_coder": "qwen3",
    "glm45": "glm45", "glm47": "glm45",
    "minimax_m2": "minimax",
    "kimi_k2": "kimi_k2", "gpt-oss": "gpt-oss",
}
