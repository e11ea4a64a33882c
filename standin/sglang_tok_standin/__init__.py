"""A stand-in for SGLang's scheduler: SGLang's own launcher starts it in the scheduler's
place (the `sglang_tok_standin` plugin, with `SGLANG_TOK_STANDIN` set), and it sends SGLang's
own `BatchTokenIDOutput` messages, filled as the scheduler fills them, for token ids that
come from synthetic streams or a recorded trace instead of a model. With it, SGLang's whole
server (HTTP, TokenizerManager, detokenizer) runs and is load-tested on a CPU box.

It runs on every SGLang release 0.5.12-0.5.23, following what each release's modules
have (its launcher's arguments, settings, ready message, IPC and message classes), and
replays a trace recorded on any of them into any other.

`requests` and `step_columns` are SGLang's per-request state and step rows (by SGLang's
field names), `release_message` those columns as a release's own message, built by field
name, `streams` and `trace_reader` where the ids come from, `core` the steps without
sockets, `main` the process (the only module that imports SGLang), `config` its settings,
`offline_engine` SGLang's offline Engine on it, `kernel/` a stand-in for `sgl_kernel` on a
CPU box. A distribution of its own (`standin/pyproject.toml`), never installed with
`pip install sglang-tok`: its plugin entry point is of SGLang's group, which SGLang loads
whole when SGLANG_PLUGINS is unset.
"""
