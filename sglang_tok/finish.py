"""How a request ended, as the scheduler says it (`finish_reasons`)."""

from __future__ import annotations

from typing import Any

FinishReason = dict[str, Any]
FINISH_TYPES = frozenset(("stop", "length", "abort"))
