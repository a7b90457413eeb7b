"""What an OrmStore commit writes inside its transaction (runs/storage/orm.py), after the
fenced UPDATE of the run row that locked it: the effects (and what a rollback
supersedes), the events numbered on from the run's count, the family rule, and the
features' answer to a wait for input."""

from __future__ import annotations

from datetime import datetime

from django.db.models import F, Q

from runs.durable import family
from runs.durable import records as r
from runs.hooks import hooks
from runs.models import Effect, Run, RunEvent
from runs.storage import columns
from runs.storage.columns import to_dt


def run_fields(commit: r.Commit, action: r.OperatorCommit | None, now_dt: datetime) -> dict:
    """The run row's update of a commit, as values and F expressions by field name."""
    fields = {name: (to_dt(value) if name in columns.RUN_TIMES else value)
              for name, value in commit.run.fields().items()}
    new_events = len(commit.events) + (1 if commit.checkpoint is not None else 0)
    fields.update(event_seq=F("event_seq") + new_events, updated_at=now_dt)
    if action is not None and action.take_over:
        fields["epoch"] = F("epoch") + 1
    if commit.release:
        fields.update(lease_owner=None, lease_expires_at=None)
    if commit.checkpoint is not None:
        fields["checkpoint_count"] = F("checkpoint_count") + 1
    if fields.get("status") in r.FINAL_STATUSES:
        fields["finished_at"] = now_dt
    return fields


def write_effects(run_id: str, branch: int, effects: list[r.EffectRecord],
                  supersede: r.Supersede | None) -> None:
    """Inside a commit's transaction: what `supersede` marks, then the effects (an outcome
    over its intent at the same position; one carried over, by its key)."""
    if supersede is not None:
        (Effect.objects.filter(superseded_where(branch, supersede), run_id=run_id,
                               superseded=False)
         .update(superseded=True))
    for effect in effects:
        if effect.moved_from is not None:  # carried over (runs/durable/upgrade.py)
            Effect.objects.filter(run_id=run_id, key=effect.key).update(
                **columns.effect_values(effect))
    written = [e for e in effects if e.moved_from is None]
    if written:
        Effect.objects.bulk_create(
            [Effect(run_id=run_id, **columns.effect_values(e)) for e in written], update_conflicts=True,
            unique_fields=["run", "branch", "step_no", "seq"],
            update_fields=list(columns.EFFECT_OUTCOME))


def write_events(run_id: str, after_seq: int, events: list, now_dt: datetime) -> None:
    """The commit's events, numbered on from `after_seq`."""
    RunEvent.objects.bulk_create([
        RunEvent(run_id=run_id, seq=after_seq + i, kind=kind, data=data, created_at=now_dt)
        for i, (kind, data) in enumerate(events, start=1)])


def family_rule(run_id: str, parent_id: str | None, status: str | None,
                attention: dict | None, now_dt: datetime) -> None:
    """runs/durable/family.py, inside the commit's transaction, whose first statement
    locked the run's row. A child that ends locks its parent's row (always, so that a
    parent committing a wait meanwhile is ordered against it) and wakes a parent waiting
    on it; a parent's wait, its row locked, looks at its pending children (a fresh
    snapshot per statement) and is woken if one already ended."""
    if status in r.FINAL_STATUSES and parent_id is not None:
        parent = (Run.objects.select_for_update().filter(pk=parent_id)
                  .only("status", "attention").first())
        if parent is not None and family.wakes(parent.status, parent.attention, run_id):
            Run.objects.filter(pk=parent_id).update(wake_at=now_dt)
    elif status == r.WAITING and family.pending(attention):
        final = set(Run.objects.filter(pk__in=family.pending(attention),
                                       status__in=r.FINAL_STATUSES).values_list("id", flat=True))
        if family.woken_at_once(attention, final):
            Run.objects.filter(pk=run_id).update(wake_at=now_dt)


def waits_for_input(commit: r.Commit) -> bool:
    """The commit makes the run wait for a person's input (ctx.wait_for_input)."""
    return (commit.run.get("status") == r.WAITING
            and (commit.run.get("attention") or {}).get("kind") == "input")


def input_rule(run_id: str, commit: r.Commit) -> None:
    """Inside the commit's transaction, the run's row locked: a commit that makes the run
    wait for input lets the features answer it at once (chat: a message queued while the
    run was busy, runs/chat/services.py). Answered after the commit instead, the run
    would be seen waiting for input, its answer queued, until then."""
    if waits_for_input(commit):
        for hook in hooks.input_wait:
            hook(run_id)


def superseded_where(newest_branch: int, supersede: r.Supersede) -> Q:
    """The live effects `supersede` marks: after its step on the kept branches, all of
    them on the others (a run's branches are 1 to its newest, the live one). Named
    branch by branch, so that the scan stays inside the partial index of live effects
    and reads what it marks, not what earlier rollbacks marked."""
    dropped = [b for b in range(1, newest_branch + 1) if b not in supersede.keep_branches]
    return (Q(branch__in=supersede.keep_branches, step_no__gt=supersede.after_step)
            | Q(branch__in=dropped) | Q(branch__gt=newest_branch))
