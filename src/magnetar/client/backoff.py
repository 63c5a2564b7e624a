"""Delays: the reconnection backoff and PIP-106's redelivery backoff.

Both are pure computations; the time source and the randomness are inputs so
that tests drive them without sleeping.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

Clock = Callable[[], float]


class Backoff:
    """Exponential backoff with jitter, as Pulsar clients reconnect (100 ms .. 60 s).

    ``next()`` returns the delay before the next attempt; ``reset()`` after a
    success.  ``elapsed()`` is the time since the first attempt after the last
    reset, measured on ``clock``.
    """

    __slots__ = ("_clock", "_current", "_first_attempt", "_rng", "initial", "jitter", "maximum",
                 "multiplier")

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 60.0,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.1,
        clock: Clock = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError("backoff needs 0 < initial <= maximum")
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
        self._clock = clock
        self._rng = rng
        self._current = initial
        self._first_attempt: float | None = None

    def next(self) -> float:
        if self._first_attempt is None:
            self._first_attempt = self._clock()
        delay = self._current
        self._current = min(self._current * self.multiplier, self.maximum)
        # Jitter spreads reconnecting clients apart; it never exceeds ``maximum``.
        delay -= delay * self.jitter * self._rng()
        return max(delay, 0.0)

    def reset(self) -> None:
        self._current = self.initial
        self._first_attempt = None

    def elapsed(self) -> float:
        if self._first_attempt is None:
            return 0.0
        return self._clock() - self._first_attempt


class RedeliveryBackoff:
    """Delay before a negatively acknowledged message is redelivered (PIP-106)."""

    def next_delay(self, redelivery_count: int) -> float:
        raise NotImplementedError


class MultiplierRedeliveryBackoff(RedeliveryBackoff):
    """``min(max_delay, min_delay * multiplier ** redelivery_count)`` seconds.

    ``redelivery_count`` is the count the broker sent with the message, so the
    first nack of a fresh message waits ``min_delay``, the next ``min_delay *
    multiplier`` and so on — the same curve as the Java client's
    ``MultiplierRedeliveryBackoff``.  Computed in closed form: any count costs the
    same.
    """

    __slots__ = ("_cap", "max_delay", "min_delay", "multiplier")

    def __init__(
        self, min_delay: float = 1.0, max_delay: float = 60.0, multiplier: float = 2
    ) -> None:
        if min_delay < 0 or max_delay < min_delay:
            raise ValueError("MultiplierRedeliveryBackoff needs 0 <= min_delay <= max_delay")
        if multiplier < 1:
            raise ValueError("MultiplierRedeliveryBackoff needs multiplier >= 1")
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.multiplier = multiplier
        # From this exponent on the curve is at max_delay for sure (one step of margin
        # for rounding), so no count raises the multiplier higher than this.
        self._cap: int | None = None
        if min_delay > 0 and multiplier > 1 and math.isfinite(max_delay):
            self._cap = math.ceil(
                (math.log(max_delay) - math.log(min_delay)) / math.log(multiplier)
            ) + 1

    def next_delay(self, redelivery_count: int) -> float:
        if self.min_delay == 0:
            return 0.0
        if self.multiplier == 1:
            return self.min_delay
        exponent = max(redelivery_count, 0)
        if self._cap is not None and exponent > self._cap:
            exponent = self._cap
        try:
            delay = self.min_delay * float(self.multiplier) ** exponent
        except OverflowError:
            return self.max_delay
        return min(delay, self.max_delay)

    def __repr__(self) -> str:
        return (
            f"MultiplierRedeliveryBackoff(min_delay={self.min_delay}, "
            f"max_delay={self.max_delay}, multiplier={self.multiplier})"
        )
