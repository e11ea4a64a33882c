"""The benchmarks and load tools behind `scripts/` (a script parses its flags and calls one
`main` here), and what they share; nothing here runs in the service.

Shared: timers (`timing`), figures and tables (`figures`), corpora and trained tokenizers
(`corpora`), a frame's rows and the egress's routing (`rows`), process trees and their CPU
(`processes`), the lean peers (`baselines`, a process of its own:
`python -m sglang_tok.harness.bench.baselines`), the SGLang server benchmark's capacity
model (`capacity`) and its clients' gap histograms (`gap_hist`). The service is started
the harness's one way (`sglang_tok.harness.service.Service`).

Load, traces and faults (`scripts/load/`): `synth`, `record`, `replay`, `soak`, `faults`,
`fuzz`, `overload`, `load_openai`. Native benchmarks (`scripts/bench/`): `peers`, `stages`,
`against`, `decoder`, `fallback`, `parsers`, `writer`, `encode` (its one-process baseline:
`python -m sglang_tok.harness.bench.encode`).

Another checkout to measure against (`checkout`: a folder with its venv, or a git revision
made into a worktree with one) runs in a process of its own python: the workers
(`against_worker.py`, `fallback_worker.py`) run as files and import only that checkout.
"""
