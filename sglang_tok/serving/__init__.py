"""The serving roof: `sglang-tok serve` (the supervisor and the service's wiring), its HTTP
endpoints, the CLI and the demo. The only code of `sglang_tok` that imports the process
folders (`ring/`, `egress/`, `shards/`, `encoders/`)."""
