"""Progress on stderr for long work (reading big inputs); silent when disabled or not a TTY-less CI log.
The label names an input: it is shown by text_safety.visible_line (no escape sequence reaches the terminal)."""
from __future__ import annotations

import sys
import time

from .text_safety import visible_line


class Progress:
    """Report `label: done/total unit` at most every `interval` seconds on stderr."""

    def __init__(self, label: str, total: float | None = None, unit: str = "MB",
                 enabled: bool = True, interval: float = 1.0, stream=None):
        self.label, self.total, self.unit = visible_line(label), total, unit
        self.enabled, self.interval = enabled, interval
        self.stream = stream or sys.stderr
        self._last = time.monotonic()
        self._shown = False

    def update(self, done: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._shown = True
        if self.total:
            pct = 100.0 * done / self.total
            self.stream.write(f"\r{self.label}: {done:,.0f}/{self.total:,.0f} {self.unit} ({pct:.0f}%)")
        else:
            self.stream.write(f"\r{self.label}: {done:,.0f} {self.unit}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\n")
            self.stream.flush()


NULL_PROGRESS = Progress("", enabled=False)
