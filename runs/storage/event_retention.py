"""Event and effect retention: an ended run's log is most of the database's bytes
(docs/scaling.md), and nobody reads most of it once the run is long over.

The policy (docs/retention.md): EVENT_RETENTION_DAYS after a run ended, delete its
events but its status events (its timeline's failures; the webhooks' outbox, read by
event id after a cursor: runs/webhooks/dispatch.py), and its effects but those still read:

* metered ones (`usage`): the ledger's days and the quotas' periods sum them;
* those an operator or a person acted on: an in-doubt call resolved (`resolution`), a
  person's input, a call an approval was asked for (the approval holds its key);
* those a resume reads (runs/storage/orm.py, load): the live effects of the run's branch
  after its latest checkpoint. A failed run may be retried, and its step then replays
  them instead of calling again.

The run row keeps what was deleted (events_pruned_before, events_pruned,
effects_pruned, pruned_at), for its page and the API.

A run is pruned in batches of `batch` rows, each a transaction of its own that first
locks the run row and checks that the run is still ended and due: a run resumed or
rolled back meanwhile is left alone from the next batch on, and two trees pruning at
once take turns on a run (the later finds less, or nothing, to delete). Effects go first,
by their position; then events, by ranges of (run_id, seq), the unique index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from runs.durable.effect import INPUT
from runs.durable.records import FINAL_STATUSES
from runs.models import Checkpoint, Effect, Run, RunEvent

logger = logging.getLogger("agentops.retention")

POSITION = ("branch", "step_no", "seq")
PAGE = 500  # due runs read at a time
# Not pruned since it ended: the predicate of the run_retention_due index. A run's pass
# sets pruned_at when it has passed its last event; a run resumed and ended again is due again.
DUE = Q(pruned_at__isnull=True) | Q(pruned_at__lt=F("finished_at"))


@dataclass(frozen=True)
class Policy:
    days: float = 30.0
    batch: int = 5000

    @classmethod
    def from_settings(cls) -> Policy:
        return cls(days=float(settings.AGENTOPS.get("EVENT_RETENTION_DAYS", 30.0)))

    @property
    def enabled(self) -> bool:
        return self.days > 0


@dataclass
class EventPruneReport:
    dry_run: bool
    enabled: bool = True
    runs: int = 0
    events: int = 0
    effects: int = 0
    batches: int = 0
    per_run: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, run_id: str, events: int, effects: int) -> None:
        if events or effects:
            self.runs += 1
            self.events += events
            self.effects += effects
            self.per_run[run_id] = {"events": events, "effects": effects}

    def as_dict(self) -> dict:
        return {"dry_run": self.dry_run, "enabled": self.enabled, "runs": self.runs,
                "events": self.events, "effects": self.effects, "per_run": self.per_run}

    def __str__(self):
        if not self.enabled:
            return "event retention is off (AGENTOPS_EVENT_RETENTION_DAYS)"
        verb = "would delete" if self.dry_run else "deleted"
        return f"{verb} {self.events} event(s) and {self.effects} effect(s) from {self.runs} run(s)"


@dataclass
class Batch:
    events: int = 0
    effects: int = 0
    after: tuple | None = None  # the position of the last effect deleted
    done: bool = False


def prune(*, dry_run: bool = False, policy: Policy | None = None,
          now: datetime | None = None) -> EventPruneReport:
    policy = policy or Policy.from_settings()
    report = EventPruneReport(dry_run=dry_run, enabled=policy.enabled)
    if not policy.enabled:
        return report
    cutoff = (now or timezone.now()) - timedelta(days=policy.days)
    for run_id in due_runs(cutoff):
        if dry_run:
            report.add(run_id, *_deletable_counts(run_id))
        else:
            report.add(run_id, *_prune_run(run_id, cutoff, policy.batch, report))
    logger.info("event retention: %s", report)
    return report


def due_runs(cutoff: datetime) -> Iterator[str]:
    """The ended runs past `cutoff` not pruned since they ended, oldest first, a page at a
    time (the run_retention_due index); a run is read once even if it stays due."""
    due = (Run.objects.filter(DUE, finished_at__isnull=False, finished_at__lte=cutoff,
                              status__in=FINAL_STATUSES)
           .order_by("finished_at", "pk").values_list("finished_at", "pk"))
    last = None
    while True:
        page = list((due.filter(Q(finished_at__gt=last[0]) | Q(finished_at=last[0],
                                                                 pk__gt=last[1]))
                     if last else due)[:PAGE])
        yield from (pk for _, pk in page)
        if len(page) < PAGE:
            return
        last = page[-1]


def _prune_run(run_id: str, cutoff: datetime, size: int,
               report: EventPruneReport) -> tuple[int, int]:
    events = effects = 0
    after = None
    while True:
        batch = prune_batch(run_id, cutoff, size, after)
        if batch is None:
            return events, effects  # pruned (by another tree too), or not due any more
        report.batches += 1
        events, effects, after = events + batch.events, effects + batch.effects, batch.after
        if batch.done:
            return events, effects


def prune_batch(run_id: str, cutoff: datetime, size: int, after: tuple | None) -> Batch | None:
    """One transaction: up to `size` effects after position `after`, or else the next
    `size` event numbers. None if the run is not (or no longer) due."""
    with transaction.atomic():
        run = _locked_due(run_id, cutoff)
        if run is None:
            return None
        rows = list(deletable_effects(run).filter(_after(after)).order_by(*POSITION)
                    .values_list("pk", *POSITION)[:size])
        if rows:
            deleted, _ = Effect.objects.filter(pk__in=[row[0] for row in rows]).delete()
            Run.objects.filter(pk=run_id).update(effects_pruned=F("effects_pruned") + deleted)
            return Batch(effects=deleted, after=rows[-1][1:])
        low, high = run.events_pruned_before, min(run.events_pruned_before + size,
                                                   run.event_seq + 1)
        deleted, _ = (RunEvent.objects.filter(run_id=run_id, seq__gte=low, seq__lt=high)
                      .exclude(kind="status").delete())
        done = high > run.event_seq
        Run.objects.filter(pk=run_id).update(
            events_pruned_before=high, events_pruned=F("events_pruned") + deleted,
            **({"pruned_at": timezone.now()} if done else {}))
        return Batch(events=deleted, after=after, done=done)


def _locked_due(run_id: str, cutoff: datetime) -> Run | None:
    rows = Run.objects.filter(DUE, pk=run_id, status__in=FINAL_STATUSES,
                              finished_at__lte=cutoff)
    if connection.features.has_select_for_update:  # SQLite: the IMMEDIATE transaction locks
        rows = rows.select_for_update()
    return rows.only("branch", "event_seq", "events_pruned_before").first()


def deletable_effects(run: Run):
    """The run's effects the policy deletes (see the module's docstring)."""
    latest = (Checkpoint.objects.filter(run_id=run.pk, branch=run.branch)
              .order_by("-step_no", "-number").values_list("step_no", flat=True).first())
    keys = run.approvals.values("key")
    return (Effect.objects.filter(run_id=run.pk, usage__isnull=True, resolution="")
            .exclude(kind=INPUT).exclude(key__in=keys)
            .exclude(branch=run.branch, step_no__gt=latest or 0, superseded=False))


def _after(position: tuple | None) -> Q:
    if position is None:
        return Q()
    branch, step_no, seq = position
    return (Q(branch__gt=branch) | Q(branch=branch, step_no__gt=step_no)
            | Q(branch=branch, step_no=step_no, seq__gt=seq))


def _deletable_counts(run_id: str) -> tuple[int, int]:
    run = Run.objects.only("branch", "events_pruned_before").get(pk=run_id)
    events = (RunEvent.objects.filter(run_id=run_id, seq__gte=run.events_pruned_before)
              .exclude(kind="status").count())
    return events, deletable_effects(run).count()
