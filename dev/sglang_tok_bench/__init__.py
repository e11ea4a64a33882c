"""The benchmarks and load tools behind `scripts/`, one module per tool with `add_cli_args`
(its flags) and `main` (a script is its entry point), and what they share; nothing here
runs in the service.

Shared: timers (`timing`), figures and tables (`figures`), corpora and trained tokenizers
(`corpora`), a frame's rows and the egress's routing (`frame_rows`), another checkout to
measure against (`checkout`), the lean peers (`baselines`), trace synthesis, recording and
replay (`synth`, `record`, `replay`). Process trees and their CPU are the test kit's
(`sglang_tok_testkit.processes`). The service is started the one way tests and the demo
start it (`sglang_tok.kit.local_service.LocalService`).

Native benchmarks (`scripts/bench/`): `peers`, `stages`, `against` (+ `against_worker`),
`decoder`, `fallback` (+ `fallback_worker`), `parsers`, `writer`, `encode`. Load and faults
(`scripts/load/`): `replay`, `record`, `synth`, `overload`, `faults`, `soak`, `fuzz`,
`load_openai`. SGLang (`scripts/sglang/`): `sglang_bench` (with SGLang's detokenizer in
`sglang_peer`), `sglang_server` (its clients `sglang_clients`, their `gap_hist`, the
`capacity` model), `sglang_faults`, the stage benchmark `sglang_stage` (its traces `stage_trace`).

Processes of their own: `python -m sglang_tok_bench.baselines`, `.encode` (the
encode baseline), `.sglang_peer` and `.sglang_clients` (in SGLang's environment). The
workers (`against_worker.py`, `fallback_worker.py`) run as files under the measured
checkout's python and import nothing of this one.
"""
