"""The integration kit: what a scheduler (`scheduler.Scheduler`) and a frontend
(`client.Client`, reading frames with `frames.decode_frame`; `encode_client.EncodeClient`)
build on to talk to the service."""
