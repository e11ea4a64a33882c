"""Load for the service: the traffic `scripts/`, the tests and the demo feed it.

`workload`: synthetic scheduler traffic and the output each request must produce;
`tracefile`: the trace format (input frames as they crossed the ring, with send times);
`frame_latency`: which input frame each output delta answers. Nothing here runs in the
service itself.
"""
