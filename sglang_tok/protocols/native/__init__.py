"""The native protocol (docs/protocol.md): BATCH and control frames in, DELTAS, COLUMNS or
PACKED out, read and written as the service's own model (`protocols/model/`) encodes them."""
