"""The serving roof: `sglang-tok serve` (the generic arbiter, `arbiter.py`, and the service's
wiring, `service.py`), its HTTP endpoints, the CLI and the demo. The only code of
`sglang_tok` that imports the process folders (`ring/`, `egress/`, `shards/`, `encoders/`),
and of it only `service.py` and `http.py`: the arbiter runs whatever children it is given."""
