"""What features add to the worker runtime, registered by each feature in its
AppConfig.ready(): the worker (runs/worker/) imports no feature and asks this module.

    input_wait    fn(run_id): inside the transaction of the commit that makes a run wait
                  for input, its row locked (runs/storage/commits.py): chat answers the
                  wait with a message queued while the run was busy, so that nobody sees
                  the run waiting for input with its answer already there
    worker_gates  fn() -> tuple of gates: asked before every new call, in the order the
                  apps registered them (budgets, approvals, shared limits); none: the
                  engine's own run budget gate
    price         fn(model, prompt_tokens, completion_tokens) -> dollars of a metered
                  call; none: usage is counted in tokens only
    side_jobs     fn(): every tick of each worker tree's duties (due schedules,
                  webhook deliveries); each must be safe with several trees at once

Registering the same function twice keeps one (ready() may run again in tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

INPUT_WAIT, WORKER_GATES, SIDE_JOBS = "input_wait", "worker_gates", "side_jobs"


@dataclass
class Hooks:
    input_wait: list[Callable[[str], object]] = field(default_factory=list)
    worker_gates: list[Callable[[], tuple]] = field(default_factory=list)
    side_jobs: list[Callable[[], object]] = field(default_factory=list)
    price: Callable[[str, int, int], float] | None = None

    def add(self, kind: str, hook: Callable) -> Callable:
        """Register `hook` under `kind` (one of the lists above); returns it."""
        hooks = getattr(self, kind)
        if hook not in hooks:
            hooks.append(hook)
        return hook

    def set_price(self, price: Callable[[str, int, int], float]) -> None:
        self.price = price

    def gates(self) -> tuple:
        return tuple(gate for provider in self.worker_gates for gate in provider())


hooks = Hooks()
