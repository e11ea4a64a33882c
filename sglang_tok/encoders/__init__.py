"""The encode service: text -> ids off the frontend's event loop (`--encode-workers`).

A broker process owns the client-facing ROUTER and hands each request to an idle worker
process (the ZeroMQ guide's load-balancing broker); see docs/protocol.md, "Encode service".
"""
