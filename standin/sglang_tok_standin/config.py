"""The stand-in scheduler's settings: one frozen struct, read once from
`SGLANG_TOK_STANDIN` by the plugin in SGLang's launcher and handed to the process.

    SGLANG_TOK_STANDIN="step_ms=20,ids_per_step=4,length=200,max_running=256"
    SGLANG_TOK_STANDIN="trace=/data/gpu-run.trace,step_ms=0"
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

ENV = "SGLANG_TOK_STANDIN"


class StandinConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # a trace the plugin recorded (SGLANG_TOK_RECORD) to replay; empty: synthetic streams
    trace: str = ""
    # milliseconds per scheduler step (a GPU's decode step); 0: as fast as the
    # detokenizer takes the messages
    step_ms: Annotated[float, Meta(ge=0)] = 20.0
    # ids each request accepts per step after its first (more than 1: speculative decoding)
    ids_per_step: Annotated[int, Meta(ge=1, le=64)] = 1
    # the running batch's bound (SGLang's --max-running-requests); the rest wait
    max_running: Annotated[int, Meta(ge=1)] = 4096
    # synthetic streams: ids before EOS, varied per request by +-spread of it
    length: Annotated[int, Meta(ge=1)] = 256
    spread: Annotated[float, Meta(ge=0, le=1)] = 0.5
    # synthetic streams chosen by the prompt alone, not also by arrival order: requests sent
    # at once get the same ids on two servers (a comparison of two detokenizers)
    by_prompt: bool = False
    # a file to append one JSON line per ended request to (rid, ids, finish): the ledger
    # a benchmark checks every text against
    ledger: str = ""
    # the EOS id; -1: the tokenizer's own (tokenizer_config.json's eos_token)
    eos: int = -1
    # a file the stand-in keeps its counters in (JSON: ids and steps sent so far), rewritten
    # a few times a second: a benchmark reads what the scheduler generated in a window
    status: str = ""


def for_rank(path: str, dp_rank: int) -> str:
    """A DP rank's own ledger or status file: with --dp-size N, N stand-ins run, and one file
    written by all would lose counts (each rewrites the status) and interleave ledger lines;
    rank 0 keeps the path named, so a run without DP reads what it always read."""
    return f"{path}.dp{dp_rank}" if path and dp_rank else path


def parse(text: str) -> StandinConfig:
    """`key=value,key=value`, or a JSON object."""
    text = text.strip()
    if text.startswith("{"):
        return msgspec.json.decode(text, type=StandinConfig)
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"{ENV}: {part!r} is not key=value")
        fields[key.strip()] = value.strip()
    try:
        return msgspec.convert(fields, StandinConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{ENV}: {exc}") from None
