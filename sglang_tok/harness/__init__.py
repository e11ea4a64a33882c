"""The harness that tests, scripts, `sglang-tok demo` and the example OpenAI server build on;
nothing here runs in the service itself.

Start and drive the real service (`service`: `Service`, `send_steps`); the synchronous
frontend on its output (`frontend`: `Frontend`, `barrier`, `ready`); synthetic scheduler
traffic and the output each request must produce (`workload`); which input frame each output
delta answers (`frame_latency`); ring fuzzing (`fuzzing`); slow, obviously-correct references
the fast paths are checked against (`oracles`); small tokenizers of every family, trained
in-process (`zoo`); the egress's routing in-process (`local_route`); SGLang's side of the
wire for tests (`sglang_side`); and the stand-in for SGLang's scheduler (`standin/`).
"""
