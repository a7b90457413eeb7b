"""Named fault points, so crash tests can fail the engine at a chosen instant.

Two ways to arm a point:
  * in-process: `faults.arm("after_effect_before_log", action)` (unit tests);
  * across processes: a file named after the point in the directory given by
    AGENTOPS_FAULTS_DIR. The first process to reach the point claims the file
    (an atomic rename, so exactly one process fires it) and performs the action
    written in it: "kill" (SIGKILL itself), "term", "stop" (SIGSTOP itself),
    "raise", or "sleep:SECONDS". An optional "@TEXT" suffix restricts it to hits
    whose tag ("agent/tool") contains TEXT, e.g. "kill@crawl" or
    "kill@send_notification".
"""

import os
import signal
import time

POINTS = (
    "before_effect",             # the intent is logged, the tool not yet called
    "after_effect_before_log",   # the tool ran, its result is not logged
    "before_retry_wait",         # an attempt failed, its durable retry wait not yet written
    "after_checkpoint_before_event",  # inside the checkpoint's transaction, before it commits
    "after_checkpoint",          # the checkpoint committed
    "lease_renewal",             # the renewal thread, before it writes
    "before_release",            # a step boundary hand-off, before the release commits
    "after_spawn_before_log",    # a child run launched, its spawn effect not logged
    "before_children_wait",      # a wait looked at its children, its waiting not committed
)


class InjectedFault(Exception):
    """Raised by a fault point armed with "raise"."""


class FaultPoints:
    def __init__(self):
        self._armed: dict[str, object] = {}
        self.directory = os.environ.get("AGENTOPS_FAULTS_DIR", "")

    def arm(self, point: str, action) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {', '.join(POINTS)}")
        self._armed[point] = action

    def disarm(self) -> None:
        self._armed.clear()

    def armed(self, point: str) -> bool:
        """Whether `point` may fire: a one-statement commit, which has no instant inside
        its transaction, runs the same statement in an explicit transaction then
        (runs/storage/pg.py), so that the point fires on the production path."""
        if point in self._armed:
            return True
        return bool(self.directory) and os.path.exists(os.path.join(self.directory, point))

    def hit(self, point: str, tag: str = "") -> None:
        if self._armed:
            action = self._armed.get(point)
            if action is not None:
                action() if callable(action) else perform(str(action))
        if self.directory:
            self._hit_file(point, tag)

    def _hit_file(self, point: str, tag: str) -> None:
        path = os.path.join(self.directory, point)
        try:
            with open(path) as fh:
                spec = fh.read().strip()
        except FileNotFoundError:
            return
        action, _, only = spec.partition("@")
        if only and only not in tag:
            return
        try:
            os.rename(path, f"{path}.fired.{os.getpid()}")
        except FileNotFoundError:
            return  # another process claimed it first
        perform(action or "kill")


def perform(action: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "term":
        os.kill(os.getpid(), signal.SIGTERM)
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "raise":
        raise InjectedFault("injected fault")
    elif action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))
    else:
        raise ValueError(f"unknown fault action {action!r}")


faults = FaultPoints()
