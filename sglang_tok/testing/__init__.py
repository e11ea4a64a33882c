"""The harness tests, scripts, `sglang-tok demo` and the example OpenAI server build on.

`service`: start the real service, stand in for its scheduler and frontend, barrier, kill
and wait (`Service`, `send_steps`); `fuzzing`: frame mutators and the ring fuzzing round;
`oracles`: slow, obviously-correct references the fast decoding paths are checked against;
`zoo`: small tokenizers of every family, trained in-process.
Nothing here runs in the service itself.
"""
