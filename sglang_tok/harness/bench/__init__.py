"""The benchmarks and load tools behind `scripts/` (each script parses its flags and calls
one `main` here), and what they share; nothing here runs in the service.

Shared: timers (`timing`), figures and tables (`figures`), corpora and trained tokenizers
(`corpora`), a frame's rows and the egress's routing (`rows`), process trees and their CPU
(`processes`), another checkout to measure against (`checkout`), the lean peers
(`baselines`), trace synthesis, recording and replay (`synth`, `record`, `replay`).
The service is started the harness's one way (`sglang_tok.harness.service.Service`).

Native benchmarks (`scripts/bench/`): `peers`, `stages`, `against` (+ `against_worker`),
`decoder`, `fallback` (+ `fallback_worker`), `parsers`, `writer`, `encode`. Load and faults
(`scripts/load/`): `replay`, `record`, `synth`, `overload`, `faults`, `soak`, `fuzz`,
`load_openai`. SGLang (`scripts/sglang/`): `sglang_bench` (with SGLang's detokenizer in
`sglang_peer`), `sglang_server` (its clients `sglang_clients`, their `gap_hist`, the
`capacity` model), `sglang_faults`.

Processes of their own: `python -m sglang_tok.harness.bench.baselines`, `.encode` (the
encode baseline), `.sglang_peer` and `.sglang_clients` (in SGLang's environment). The
workers (`against_worker.py`, `fallback_worker.py`) run as files under the measured
checkout's python and import nothing of this one.
"""
