"""The native protocol (docs/protocol.md): BATCH and control frames in, DELTAS, COLUMNS or
PACKED out."""
