"""The tests' name for the harness; it lives in the package (`sglang_tok.harness.service`)."""

from sglang_tok.harness.service import Service, send_steps

__all__ = ["Service", "send_steps"]
