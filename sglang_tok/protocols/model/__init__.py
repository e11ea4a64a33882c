"""What every protocol translates to, and the service speaks inside: the rows of a step
(`batch`), the control messages (`control`, routed by `dispatch`), the output (`deltas`,
`columns`, `packed`, written by `output`'s sinks), each with its native frame (`tags`;
docs/protocol.md). The native protocol (`protocols/native/`) reads and writes these frames
as they are; another (`protocols/sglang/`) translates its own messages into them."""
