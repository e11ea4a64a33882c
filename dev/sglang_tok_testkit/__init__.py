"""What the tests and the tools share beside `tests/`; nothing here runs in the service,
and nothing here is installed by `pip install sglang-tok`.

Which input frame each output delta answers (`frame_latency`); ring fuzzing (`fuzzing`);
slow, obviously-correct references the fast paths are checked against (`oracles`); small
tokenizers of every family, trained in-process (`zoo`); the egress's routing in-process
(`local_route`); SGLang's side of the wire for tests (`sglang_side`); process trees, their
CPU and the folders another python needs on its path (`processes`); SGLang releases laid out
beside the side environment and whole servers of them (`releases`), the release matrix
(`matrix`, `matrix_compare`) and SGLang's serving modes compared stock against the plugin
(`serving_modes`). Starting and driving the real service is the kit's, in the wheel
(`sglang_tok.kit.local_service`, `sglang_tok.kit.sync_frontend`, `sglang_tok.kit.workload`):
`sglang-tok demo` runs on it.
"""
