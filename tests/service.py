"""The tests' name for the harness; it lives in the package (`sglang_tok.testing.service`)."""

from sglang_tok.testing.service import Service, send_steps

__all__ = ["Service", "send_steps"]
