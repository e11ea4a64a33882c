"""The tests' name for the harness; it lives in the package (`sglang_tok.testing`)."""

from sglang_tok.testing import Service, send_steps

__all__ = ["Service", "send_steps"]
