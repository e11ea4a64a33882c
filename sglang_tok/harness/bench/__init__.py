"""The benchmarks and load tools behind `scripts/`, and what they share; nothing here runs
in the service.

Shared: timers (`timing`), figures and tables (`figures`), corpora and trained tokenizers
(`corpora`), a frame's rows and the egress's routing (`rows`), process trees and their CPU
(`processes`), the lean peers (`baselines`, a process of its own:
`python -m sglang_tok.harness.bench.baselines`), the SGLang server benchmark's capacity
model (`capacity`) and its clients' gap histograms (`gap_hist`).
"""
