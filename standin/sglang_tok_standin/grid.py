"""When the stand-in scheduler steps: on a grid of `step_ms` (a GPU's decode step), which
starts again at the first request after an idle spell. A step taken late does not make the
next one early: an idle spell ending mid-poll would otherwise send a request's first two
steps back to back, which no GPU does."""

from __future__ import annotations


class StepGrid:
    """The next step's time, in the caller's clock (seconds)."""

    __slots__ = ("step_s", "next")

    def __init__(self, step_s: float) -> None:
        self.step_s = max(step_s, 0.0)
        self.next: float | None = None  # None: idle, the next request steps at once

    def idle(self) -> None:
        self.next = None

    def wait_s(self, now: float) -> float:
        """How long until a step is due (0: now)."""
        if self.next is None:
            return 0.0
        return max(0.0, self.next - now)

    def due(self, now: float) -> bool:
        if self.next is None:
            self.next = now
        return now >= self.next

    def stepped(self, now: float) -> None:
        """A step was taken at `now`: the next is a step after the one due, or now where
        the steps fell behind (a step slower than the grid)."""
        due = self.next if self.next is not None else now
        self.next = max(due + self.step_s, now) if self.step_s else now
