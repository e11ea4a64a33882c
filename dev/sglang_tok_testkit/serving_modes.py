"""SGLang's serving modes, each run twice on the same stand-in streams (SGLang's own
detokenizer, then the plugin) and compared: what a mode starts the server with, what it
asks, and what counts as the same reply.

Texts are compared whole (each against the stand-in's ledger: the full decode of the ids it
sent, after stops), never chunk by chunk: where a row ends mid-character SGLang holds the
complete characters before the partial one and the plugin sends them at once, so a stream
may be cut differently while every final text is equal. `meta_info` is compared key by key;
values that are clocks (latencies, timestamps, queue times), request ids and the DP rank
(the controller's round robin follows arrival order) are left out, their keys are not.

Nothing here imports SGLang: `tests/sglang/test_standin_modes.py` starts the servers.
"""

from __future__ import annotations

from typing import Any

import msgspec

# the stand-in's streams keyed by prompt, not arrival order: requests sent at once (rows
# cut across shards and workers) get the same ids on both servers
STANDIN = "by_prompt=1"
PLUGINS = {"stock": "sglang_tok_standin", "plugin": "sglang_tok,sglang_tok_standin"}


def _ask(text: str, stream: bool = True, **sampling: Any) -> dict[str, Any]:
    return {"text": text, "stream": stream, "sampling_params": sampling}


# every mode's requests: streaming and not, a stop string, special tokens kept, a long run
ASKS: tuple[dict[str, Any], ...] = (
    _ask("Once upon a time", max_new_tokens=64),
    _ask("The quick brown fox", max_new_tokens=120, ignore_eos=True),
    _ask("Hello world", stream=False, max_new_tokens=48),
    _ask("A list of things", max_new_tokens=120, stop=["the"]),
    _ask("Numbers", max_new_tokens=80, skip_special_tokens=False),
    _ask("Short", max_new_tokens=1),
)


class Mode(msgspec.Struct, frozen=True, kw_only=True):
    """One serving mode: SGLang's flags, the stand-in's settings beyond `STANDIN`, its
    requests (None: `ASKS`), and how they are sent."""

    name: str
    args: tuple[str, ...] = ()
    standin: str = ""
    asks: tuple[dict[str, Any], ...] | None = None
    # requests sent at once (several rows per message) or one after another
    together: bool = True
    # the server takes and returns ids only (--skip-tokenizer-init)
    ids_only: bool = False
    # SGLang's offline Engine in a script, not a server
    engine: bool = False

    def requests(self) -> tuple[dict[str, Any], ...]:
        return self.asks if self.asks is not None else ASKS


_N_STOP = (
    {"text": "Two tellings", "stream": True,
     "sampling_params": {"n": 2, "max_new_tokens": 120, "stop": ["the", "and"]}},
    {"text": "Three tellings", "stream": False,
     "sampling_params": {"n": 3, "max_new_tokens": 60, "stop": ["of"]}},
    _ask("Once upon a time", max_new_tokens=64),
)

# a decode server's requests, two of them aborted before any output (their KV cache never
# arrived: the stand-in's sglang_tok_abort_first), one streamed, one not
_PD_DECODE = (*ASKS,
              _ask("Lost transfer", max_new_tokens=32,
                   custom_params={"sglang_tok_abort_first": 1}),
              _ask("Lost transfer too", stream=False, max_new_tokens=32,
                   custom_params={"sglang_tok_abort_first": 1}))

# the field's shape (sglang#34740): 8 DP ranks, each scheduler's rows to 8 detokenizer
# workers or shards; two requests per rank, streamed and not
_DP8 = tuple(_ask(f"Rank {k}: tell me about the sea", stream=k % 3 != 2,
                  max_new_tokens=24 + 8 * (k % 5)) for k in range(16))

# ids in and out: no stop strings (SGLang needs its tokenizer for them)
_IDS = tuple(a for a in ASKS if "stop" not in a["sampling_params"])
METRICS = ("--enable-metrics",)
MODES: tuple[Mode, ...] = (
    Mode(name="dp", args=("--dp-size", "2", *METRICS)),
    # dp 8 with 8 shards (stock: its router and 8 workers): a test of shape, not of speed
    Mode(name="dp8", args=("--dp-size", "8", "--detokenizer-worker-num", "8", *METRICS),
         asks=_DP8),
    Mode(name="dp-attention", args=("--enable-dp-attention", "--dp-size", "2", "--tp-size",
                                    "2", "--detokenizer-worker-num", "2", *METRICS)),
    Mode(name="workers", args=("--tokenizer-worker-num", "2", "--detokenizer-worker-num", "2",
                               *METRICS)),
    Mode(name="stream-interval", args=("--stream-interval", "4", *METRICS)),
    Mode(name="incremental", args=("--incremental-streaming-output", *METRICS)),
    Mode(name="n-stop", args=METRICS, asks=_N_STOP),
    Mode(name="speculative", args=("--speculative-algorithm", "NGRAM",
                                   "--speculative-num-draft-tokens", "4", *METRICS),
         standin="ids_per_step=3"),
    Mode(name="skip-tokenizer-init", args=("--skip-tokenizer-init", *METRICS), asks=_IDS,
         ids_only=True),
    Mode(name="engine", engine=True),
    # a PD decode server (the KV cache "transferred" by SGLang's fake backend; the
    # TokenizerManager gives each request a fake bootstrap room)
    Mode(name="pd-decode", args=("--disaggregation-mode", "decode",
                                 "--disaggregation-transfer-backend", "fake", *METRICS),
         asks=_PD_DECODE),
)


def by_name(name: str) -> Mode:
    return next(m for m in MODES if m.name == name)


# meta_info values set by when and in what order requests arrived, not by the detokenizer:
# the request id, and the DP rank the controller's round robin gave it
ORDERED = frozenset(("id", "dp_rank"))


def is_clock(key: str) -> bool:
    """A meta_info value that is a clock reading, an id or a DP placement: its key must be
    there on both servers, its value may differ."""
    return key in ORDERED or key.endswith("_ts") or any(
        w in key for w in ("time", "latency", "throughput", "duration", "delay"))


def meta_differences(stock: dict[str, Any], plugin: dict[str, Any], where: str = ""
                     ) -> list[str]:
    """Each way two replies' meta_info differ: a key only one has, or a value (not a
    clock's) that is not equal."""
    out = [f"{where}{k}: only stock has it" for k in sorted(stock.keys() - plugin.keys())]
    out += [f"{where}{k}: only the plugin has it" for k in sorted(plugin.keys() - stock.keys())]
    for key in sorted(stock.keys() & plugin.keys()):
        if is_clock(key):
            continue
        a, b = stock[key], plugin[key]
        if a != b:
            out.append(f"{where}{key}: {str(a)[:80]} != {str(b)[:80]}")
    return out


def replies(out: Any) -> list[dict[str, Any]]:
    """A /generate reply (or an Engine's) as its list of sequences: n > 1 gives a list."""
    return list(out) if isinstance(out, list) else [out]


__all__ = ["ASKS", "MODES", "PLUGINS", "STANDIN", "Mode", "by_name", "is_clock",
           "meta_differences", "replies"]
