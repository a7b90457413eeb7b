"""People, racing the faults: an operator who pauses, resumes, cancels, rolls back and
resolves in-doubt effects, and users who answer the questions their runs ask.

The operator resolves an in-doubt call the way the design asks of a person: look
downstream first. It arrived: "done"; it did not: "retry". The harness is the only
operator, so its log of decisions is what the audit holds repeated calls against.

Looking downstream proves nothing while the process that started the call may still
send it: a worker frozen (SIGSTOP) between its lease check and its request sends it
when it wakes, after another worker took the run over and an operator retried (the
full run with seed 4242 caught the harness doing just that). So, as a careful person
would, the operator waits until that process is gone or has been awake for a while
before it looks.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field

import httpx

from runs import services
from runs.durable import DurableError
from runs.models import Checkpoint, Effect, Run
from tests.chaos.db import db_call

ACTIVE = ("queued", "running", "paused", "waiting", "needs_attention")
RESUMABLE_ATTENTION = {"crash_loop"}


@dataclass
class Plan:
    """One launched run, and what the people around it did."""

    run_id: str
    config: str
    rollback_ok: bool
    launched_at: float
    followed: bool = False
    cancel_at: float | None = None       # a cancel the engine accepted
    cancel_status: str = ""              # the status it had when asked
    resume_at: float | None = None       # a pause of ours, to be resumed
    rollbacks: int = 0
    answered: int = 0
    answer_due: float | None = None


@dataclass
class Decision:
    run_id: str
    kind: str            # in_doubt / crash_loop / ...
    resolution: str      # done / retry / resume / none
    unit: str = ""
    arrived: int = 0
    at: float = 0.0
    latency: float | None = None   # from the run's attention to the decision


@dataclass
class Operator:
    harness: object
    plans: dict[str, Plan] = field(default_factory=dict)
    actions: dict[str, dict[str, int]] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    attention_seen: dict[str, int] = field(default_factory=dict)
    unresolvable: list[str] = field(default_factory=list)
    frozen_at: dict[int, float] = field(default_factory=dict)  # pid -> last seen stopped

    @property
    def rng(self):
        return self.harness.rng

    def count(self, action: str, outcome: str) -> None:
        self.actions.setdefault(action, {"ok": 0, "refused": 0})
        self.actions[action][outcome] = self.actions[action].get(outcome, 0) + 1

    def _act(self, action: str, fn, **kwargs) -> Run | None:
        try:
            run = db_call(fn, user="chaos-operator", **kwargs)
        except DurableError:
            self.count(action, "refused")   # the run moved on meanwhile: a lost race
            return None
        self.count(action, "ok")
        return run

    # --- every tick --------------------------------------------------------------------
    def tick(self) -> None:
        now = time.time()
        rows = db_call(lambda: list(Run.objects.filter(pk__in=list(self.plans), status__in=ACTIVE)
                                    .values("id", "status", "attention", "updated_at")))
        for row in rows:
            plan = self.plans[row["id"]]
            if row["status"] == "paused" and plan.resume_at and plan.resume_at <= now:
                plan.resume_at = None
                self._act("resume", services.run_resume, run_id=plan.run_id,
                          reason="chaos: end of pause")
            elif row["status"] == "waiting" and (row["attention"] or {}).get("kind") == "input":
                self._answer(plan, now)
            elif row["status"] == "needs_attention":
                self._attend(plan, row)

    def _answer(self, plan: Plan, now: float) -> None:
        if plan.answer_due is None:
            plan.answer_due = now + self.rng.uniform(0.2, 2.0)  # a person takes a moment
            return
        if plan.answer_due > now:
            return
        plan.answer_due = None
        try:
            db_call(services.run_provide_input, run_id=plan.run_id, value={"name": "chaos"},
                    user="chaos-user")
            plan.answered += 1
            self.count("answer", "ok")
        except DurableError:
            self.count("answer", "refused")

    def _attend(self, plan: Plan, row: dict) -> None:
        attention = row["attention"] or {}
        kind = attention.get("kind", "?")
        key = f"{plan.run_id}:{row['updated_at'].timestamp()}"
        if self.attention_seen.get(key):
            return
        since = row["updated_at"].timestamp()
        if kind == "in_doubt":
            self._resolve(plan, attention, since)
        elif kind in RESUMABLE_ATTENTION:
            if self._act("resume", services.run_resume, run_id=plan.run_id,
                         reason=f"chaos: {kind} after injected crashes"):
                self.decisions.append(Decision(plan.run_id, kind, "resume", at=time.time(),
                                               latency=time.time() - since))
        else:
            self.attention_seen[key] = 1
            self.unresolvable.append(f"run {plan.run_id} ({plan.config}) needs attention: "
                                     f"{kind}: {attention.get('message', '')}")

    def _caller_settled(self, worker: str, awake_for: float = 2.0) -> bool:
        """Can the process that started the call (owner "host:pid:nonce") no longer
        send it? True when it is on another host, gone, or awake for `awake_for` s."""
        host, _, rest = worker.partition(":")
        pid = int(rest.partition(":")[0]) if rest.partition(":")[0].isdigit() else 0
        if not pid or host != socket.gethostname():
            return True
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state = stat.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return True  # gone
        now = time.time()
        for fault in self.harness.result.faults:  # a thaw the operator did not see happen
            frozen = re.search(rf"\bpid {pid}, ([0-9.]+) s", fault.detail)
            if fault.kind == "tree_sigstop" and frozen:
                thawed = fault.at + float(frozen.group(1))
                self.frozen_at[pid] = max(self.frozen_at.get(pid, 0.0), min(now, thawed))
        if state in ("T", "t"):
            self.frozen_at[pid] = now
            return False
        if state == "Z" or not os.path.exists(f"/proc/{pid}"):
            return True
        return now - self.frozen_at.get(pid, 0.0) >= awake_for

    def _resolve(self, plan: Plan, attention: dict, since: float) -> None:
        if not self._caller_settled(attention.get("worker", "")):
            return  # look again on a later tick
        unit = unit_of(plan.run_id, attention.get("args_preview", ""))
        earlier = db_call(lambda: Effect.objects.filter(
            run_id=plan.run_id, status="done", idempotent=False,
            args_preview__contains=unit).exclude(key=attention.get("key")).count())
        arrived = self.harness.downstream_notifications().get(unit, 0) - earlier
        resolution = "done" if arrived > 0 else "retry"
        result = {"count": arrived, "resolved_by": "chaos operator"} if arrived > 0 else None
        run = self._act("resolve", services.run_resolve_effect, run_id=plan.run_id,
                        seq=attention["seq"], resolution=resolution, result=result,
                        reason=f"looked downstream: {arrived} arrival(s) of {unit}")
        if run is not None:
            self.decisions.append(Decision(plan.run_id, "in_doubt", resolution, unit, arrived,
                                           time.time(), time.time() - since))

    # --- the racing actions -----------------------------------------------------------------
    def act_at_random(self) -> None:
        action = self.rng.choices(["pause", "rollback", "cancel"], weights=[4, 4, 2])[0]
        statuses = {"pause": ["running"], "cancel": ["running", "queued", "waiting", "paused"],
                    "rollback": ["running", "queued", "paused", "waiting"]}[action]
        candidates = db_call(lambda: sorted(Run.objects.filter(
            pk__in=[p.run_id for p in self.plans.values() if p.cancel_at is None],
            status__in=statuses).values_list("id", "status")))
        if action == "rollback":
            candidates = [c for c in candidates if self.plans[c[0]].rollback_ok]
        if not candidates:
            return
        run_id, status = self.rng.choice(candidates)
        plan = self.plans[run_id]
        if action == "pause":
            if self._act("pause", services.run_pause, run_id=run_id, reason="chaos"):
                plan.resume_at = time.time() + self.rng.uniform(0.5, 4.0)
        elif action == "cancel":
            asked = time.time()
            if self._act("cancel", services.run_cancel, run_id=run_id, reason="chaos"):
                plan.cancel_at, plan.cancel_status = asked, status
        else:
            self._rollback(plan)

    def _rollback(self, plan: Plan) -> None:
        run = db_call(Run.objects.get, pk=plan.run_id)
        numbers = db_call(lambda: list(Checkpoint.objects.filter(
            run_id=plan.run_id, branch=run.branch, step_no__lt=run.step_no)
            .order_by("number").values_list("number", flat=True)))
        if not numbers:
            return
        target = self.rng.choice(numbers)
        if self._act("rollback", services.run_rollback, run_id=plan.run_id, checkpoint=target,
                     reason="chaos"):
            plan.rollbacks += 1

    def resume_all_paused(self) -> None:
        for plan in self.plans.values():
            if plan.resume_at is not None:
                plan.resume_at = time.time()


def unit_of(run_id: str, preview: str) -> str:
    found = re.search(re.escape(run_id) + r"-[\w-]+", preview or "")
    return found.group(0) if found else ""


def notifications(sandbox_url: str) -> dict[str, int]:
    response = httpx.get(f"{sandbox_url}/api/notifications", params={"limit": 0}, timeout=30)
    response.raise_for_status()
    return response.json()["per_unit"]
