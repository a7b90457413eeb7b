"""Checkpoint retention: checkpoints cost storage, and an ended run needs few of them.
(Events' and effects' retention: runs/storage/event_retention.py; both: docs/retention.md.)

The policy, per run that ended more than a grace period ago: keep the latest
KEEP checkpoints of every branch, plus every checkpoint that an operator action
refers to (the target of a rollback in an audit entry, the parent a branch was
forked from, the first checkpoint of a forked branch); drop the rest. Applied
hourly by a django-q2 schedule (migration 0002) and by `manage.py runs prune`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone

from runs.durable.records import FINAL_STATUSES
from runs.models import AuditEntry, Checkpoint
from runs.storage import event_retention

logger = logging.getLogger("agentops.retention")


@dataclass(frozen=True)
class Policy:
    keep_per_branch: int = 3
    grace: timedelta = timedelta(hours=24)

    @classmethod
    def from_settings(cls) -> Policy:
        conf = settings.AGENTOPS
        return cls(keep_per_branch=int(conf.get("RETENTION_KEEP_PER_BRANCH", 3)),
                   grace=timedelta(hours=float(conf.get("RETENTION_GRACE_HOURS", 24))))


@dataclass
class PruneReport:
    dry_run: bool
    runs: int = 0
    checkpoints: int = 0
    bytes: int = 0
    per_run: dict[str, list[int]] = field(default_factory=dict)

    def __str__(self):
        verb = "would drop" if self.dry_run else "dropped"
        return (f"{verb} {self.checkpoints} checkpoint(s), {self.bytes} bytes, "
                f"from {self.runs} run(s)")


def prune(*, dry_run: bool = False, policy: Policy | None = None,
          now: datetime | None = None) -> PruneReport:
    policy = policy or Policy.from_settings()
    cutoff = (now or timezone.now()) - policy.grace
    report = PruneReport(dry_run=dry_run)
    for run_id in candidate_runs(cutoff, policy.keep_per_branch):
        numbers, size = _prune_run(run_id, policy.keep_per_branch, dry_run)
        if numbers:
            report.runs += 1
            report.checkpoints += len(numbers)
            report.bytes += size
            report.per_run[run_id] = numbers
    logger.info("retention: %s", report)
    return report


def apply(*, dry_run: bool = False) -> tuple[PruneReport, event_retention.EventPruneReport]:
    """Both policies, checkpoints' then events' and effects', as a worker tree's duties
    and `manage.py runs prune` apply them."""
    return prune(dry_run=dry_run), event_retention.prune(dry_run=dry_run)


def prune_task() -> str:
    """The django-q2 scheduled task."""
    checkpoints, events = apply()
    return f"{checkpoints}; {events}"


def candidate_runs(cutoff: datetime, keep: int) -> list[str]:
    """Ended runs with a branch holding more than `keep` checkpoints (one grouped query)."""
    over = (Checkpoint.objects
            .filter(run__status__in=FINAL_STATUSES, run__finished_at__lte=cutoff)
            .values("run_id", "branch").annotate(n=Count("id")).filter(n__gt=keep))
    return sorted({row["run_id"] for row in over})


def kept_numbers(checkpoints: list[dict], referred: set[int], keep: int) -> set[int]:
    """The checkpoint numbers the policy keeps, from rows with number, branch, step_no,
    parent_number and base_number."""
    kept = set(referred)
    by_branch: dict[int, list[dict]] = {}
    for c in checkpoints:
        by_branch.setdefault(c["branch"], []).append(c)
        if c["parent_number"] is not None:
            kept.add(c["number"])          # the root of a forked branch
            kept.add(c["parent_number"])   # and what it was forked from
    for rows in by_branch.values():
        rows.sort(key=lambda c: (c["step_no"], c["number"]), reverse=True)
        kept.update(c["number"] for c in rows[:keep])
    # A patch checkpoint is stored against a base: keep every base a kept one needs.
    base_of = {c["number"]: c.get("base_number") for c in checkpoints}
    for number in list(kept):
        base = base_of.get(number)
        while base is not None and base not in kept:
            kept.add(base)
            base = base_of.get(base)
    return kept


def referred_by_audit(run_id: str) -> set[int]:
    numbers = set()
    for after in AuditEntry.objects.filter(run_id=run_id).values_list("after", flat=True):
        number = (after or {}).get("checkpoint")
        if isinstance(number, int):
            numbers.add(number)
    return numbers


def _prune_run(run_id: str, keep: int, dry_run: bool) -> tuple[list[int], int]:
    rows = list(Checkpoint.objects.filter(run_id=run_id)
                .values("id", "number", "branch", "step_no", "parent_number", "base_number",
                        "size"))
    kept = kept_numbers(rows, referred_by_audit(run_id), keep)
    dropped = [c for c in rows if c["number"] not in kept]
    if dropped and not dry_run:
        Checkpoint.objects.filter(id__in=[c["id"] for c in dropped]).delete()
    return sorted(c["number"] for c in dropped), sum(c["size"] for c in dropped)


def stored_bytes(run_ids=None) -> dict[str, int] | int:
    """Checkpoint bytes: per run for `run_ids`, or the total."""
    if run_ids is None:
        return Checkpoint.objects.aggregate(total=Sum("size"))["total"] or 0
    rows = (Checkpoint.objects.filter(run_id__in=list(run_ids)).values("run_id")
            .annotate(total=Sum("size")).order_by())
    return {row["run_id"]: row["total"] for row in rows}
