"""A stand-in for SGLang's scheduler: SGLang's own launcher starts it in the scheduler's
place (the `sglang_tok_standin` plugin, with `SGLANG_TOK_STANDIN` set), and it sends SGLang's
own `BatchTokenIDOutput` messages, filled as the scheduler fills them, for token ids that
come from synthetic streams or a recorded trace instead of a model. With it, SGLang's whole
server (HTTP, TokenizerManager, detokenizer) runs and is load-tested on a CPU box.

`requests` and `rows` are SGLang's per-request state and step rows, `streams` and `record`
where the ids come from, `core` the steps without sockets, `main` the process (the only
module that imports SGLang), `config` its settings.
"""
