"""Retry policies: how long a failing tool call is tried again, and what is worth trying.

The field names are those of Temporal's RetryPolicy, so a policy reads the same
to someone who knows it. Waits are computed, never drawn: the jitter of the wait
after attempt n of the effect with idempotency key k is a hash of (k, n), so a
replayed or resumed run waits exactly as the first execution did, and runs that
failed together (one outage) still spread their retries apart.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from .errors import PermanentToolError, StateNotSerializableError, TransientToolError

# The longest wait a server's Retry-After can ask for: a day. A larger one (a hostile
# or broken server, "1e400", a date in the year 9999) would park a run for years, or
# past what a wake time can hold; an operator can still give up or retry now.
RETRY_AFTER_LIMIT = 86400.0
# The longest durable timer (a retry's wait, a ctx.sleep): a century. A longer one is
# a bug, better refused at once than a wake time past what a store's timestamps hold
# (the year 9999), which would leave the run as a crash again and again.
LONGEST_WAIT = 100 * 365 * 86400.0
# A wait no longer than this (a retry's, a ctx.sleep's) blocks the worker instead of
# releasing it: the round trip through the sweep would cost more than the wait itself.
INLINE_SLEEP_SECONDS = 1.0


def frees_the_worker(seconds: float) -> bool:
    """A wait this long is a durable timer: the run gives its worker up until then."""
    return seconds > INLINE_SLEEP_SECONDS


@dataclass(frozen=True)
class Retry:
    """How a failed tool call is tried again before its error reaches the agent.

    initial_interval     seconds to wait after the first failed attempt
    backoff_coefficient  each wait is this many times the one before
    maximum_interval     no computed wait is longer (a server's Retry-After may be)
    maximum_attempts     attempts in all, the first included; None: unlimited
    maximum_elapsed      seconds from the first attempt after which no attempt
                         starts; None: unlimited
    jitter               each wait is moved by up to this share of it, up or down

    A wait longer than about a second frees the worker: it is a durable timer
    (like ``ctx.sleep``) that survives crashes and deploys.
    """

    initial_interval: float = 0.2
    backoff_coefficient: float = 2.0
    maximum_interval: float = 5.0
    maximum_attempts: int | None = 3
    maximum_elapsed: float | None = None
    jitter: float = 0.1

    def __post_init__(self):
        for name in ("initial_interval", "maximum_interval"):
            value = getattr(self, name)
            if not 0 <= value <= LONGEST_WAIT:  # also refuses NaN
                raise ValueError(f"{name} must be a number of seconds from 0 to "
                                 f"{LONGEST_WAIT:.0f} (a century), not {value!r}")
        if not self.backoff_coefficient >= 1:  # also refuses NaN
            raise ValueError("backoff_coefficient must be at least 1")
        if self.maximum_attempts is not None and self.maximum_attempts < 1:
            raise ValueError("maximum_attempts must be at least 1 (or None: unlimited)")
        if self.maximum_elapsed is not None and self.maximum_elapsed < 0:
            raise ValueError("maximum_elapsed must not be negative (or None: unlimited)")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a share of the wait, between 0 and 1")

    def backoff(self, attempt: int, key: str = "") -> float:
        """The wait after failed attempt `attempt` (1 is the first), jittered by `key`."""
        try:
            wait = self.initial_interval * self.backoff_coefficient ** (attempt - 1)
        except OverflowError:  # unlimited attempts: the exponent outgrows a float
            wait = self.maximum_interval
        wait = min(wait, self.maximum_interval)
        if self.jitter and key:
            digest = hashlib.blake2b(f"{key}#{attempt}".encode(), digest_size=8).digest()
            share = int.from_bytes(digest, "big") / 2 ** 64  # in [0, 1)
            wait *= 1 + self.jitter * (2 * share - 1)
        return wait

    def next_wait(self, attempt: int, *, first_at: float, now: float, key: str,
                  retry_after: float | None = None) -> float | None:
        """Seconds from `now` until the attempt after failed `attempt`; None: give up.

        A server's `retry_after` is the least to wait (RFC 9110): it lengthens the
        backoff, even past maximum_interval, up to RETRY_AFTER_LIMIT, and never
        shortens it ("0" or a date in the past must not make instant attempts).

        The last wait is cut short at the `maximum_elapsed` deadline, so a call
        that may be retried for an hour has an attempt at the hour."""
        if self.maximum_attempts is not None and attempt >= self.maximum_attempts:
            return None
        wait = max(self.backoff(attempt, key), _server_wait(retry_after))
        if self.maximum_elapsed is not None:
            left = first_at + self.maximum_elapsed - now
            if left <= 0:
                return None
            wait = min(wait, left)
        return wait


NO_RETRY = Retry(maximum_attempts=1)


def _server_wait(retry_after: float | None) -> float:
    if retry_after is None or math.isnan(retry_after):
        return 0.0
    return min(max(0.0, retry_after), RETRY_AFTER_LIMIT)


def retryable(exc: BaseException, *, idempotent: bool) -> bool:
    """Whether another attempt may help and is safe.

    A non-idempotent tool is tried again only after an error that says its
    request did not reach the other side; anything else may have landed."""
    if isinstance(exc, (PermanentToolError, StateNotSerializableError)):
        return False
    if idempotent:
        return True
    return isinstance(exc, TransientToolError) and not exc.reached_target


def outcome_unknown(exc: BaseException, *, idempotent: bool) -> bool:
    """Whether a failed call of a non-idempotent tool may still have happened.

    A `TransientToolError` that may have reached the target (a read timeout, a
    dropped connection after sending, a 5xx) does not say the call failed: it says
    nobody knows. Such a call is in doubt, exactly like one cut short by a crash.
    Any other error is the tool's own word that the call failed."""
    return (not idempotent and isinstance(exc, TransientToolError)
            and exc.reached_target)


def retry_after(exc: BaseException) -> float | None:
    return exc.retry_after if isinstance(exc, TransientToolError) else None
