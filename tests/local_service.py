"""The service as the tests start it: the kit's `LocalService` (`sglang_tok.kit.local_service`)."""

from sglang_tok.kit.local_service import LocalService, send_steps

__all__ = ["LocalService", "send_steps"]
