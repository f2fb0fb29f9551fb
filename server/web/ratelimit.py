"""A token bucket: how many ops a connection may send per second.

The clock is passed in (``time.monotonic`` by default) so that tests can
drive it without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up. ``rate <= 0``
    means unlimited."""

    __slots__ = ("_clock", "_last", "_tokens", "burst", "rate")

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()

    def take(self) -> bool:
        """Spend one token; False when none is left (the op is refused)."""
        if self.rate <= 0:
            return True
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
