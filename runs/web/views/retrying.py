"""How a run waiting to retry a call is shown: one sentence, the same on every page
("retrying fetch_page in 32 s, attempt 6: HTTP 503 Service Unavailable ...")."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

from runs.durable import records as r


@dataclass(frozen=True)
class Retrying:
    tool: str
    attempt: int
    error: str
    wake_at: float

    @property
    def seconds(self) -> int:
        """Whole seconds until the next attempt (0 once it is due)."""
        return max(0, round(self.wake_at - time.time()))

    @property
    def next_attempt_at(self) -> datetime:
        return datetime.fromtimestamp(self.wake_at, tz=timezone.utc)

    def text(self) -> str:
        return f"retrying {self.tool} in {self.seconds} s, attempt {self.attempt}: {self.error}"

    def event_text(self) -> str:
        """For the event log, read later: the time of the attempt, not a countdown."""
        at = self.next_attempt_at.strftime("%H:%M:%S UTC")
        return f"retrying {self.tool} at {at}, attempt {self.attempt}: {self.error}"


def retrying(status: str, attention) -> Retrying | None:
    """The retry a run waits for, from its status and attention (or a status event)."""
    data = attention if isinstance(attention, dict) else {}
    if status != r.WAITING or data.get("kind") != "retry":
        return None
    try:
        wake_at = float(data["wake_at"])
        attempt = int(data.get("attempt", 0))
    except (KeyError, TypeError, ValueError):
        return None
    tool = str(data.get("tool") or "?").rsplit(".", 1)[-1]
    return Retrying(tool=tool, attempt=attempt, error=str(data.get("error", "")),
                    wake_at=wake_at)


def attempt_text(data: dict) -> str:
    """An "attempt" event: one failed attempt of a call, and what comes next."""
    tool = str(data.get("tool") or "?").rsplit(".", 1)[-1]
    text = f"{tool} attempt {data.get('attempt', '?')} failed: {data.get('error', '')}"
    wait = data.get("retry_in")
    if isinstance(wait, (int, float)):
        return text + f"; next attempt in {wait:.3g} s"
    return text + "; no more attempts"
