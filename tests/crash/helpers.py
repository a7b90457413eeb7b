"""Reading the outcome of a crash test: the runs, and what reached the outside world."""

from collections import Counter

from django.db.models import Count

from runs.models import Checkpoint, Effect, Run, RunEvent
from sandbox.models import Notification, Record
from tests.support.processes import RUNS_END_DEADLINE, wait_until


def wait_final(run_ids, timeout=RUNS_END_DEADLINE, resolve_in_doubt=True):
    """Wait until every run is final; resolve in-doubt notifications as an operator would:
    look downstream, and say "done" if the call arrived, "retry" if it did not."""
    from runs import services

    def all_final():
        runs = list(Run.objects.filter(pk__in=run_ids))
        for run in runs:
            if run.status == "needs_attention" and resolve_in_doubt and \
                    (run.attention or {}).get("kind") == "in_doubt":
                unit = f"{run.id}-done"
                arrived = Notification.objects.filter(unit=unit).exists()
                services.run_resolve_effect(
                    run_id=run.id, seq=run.attention["seq"], user="test-operator",
                    resolution="done" if arrived else "retry",
                    result={"count": 1} if arrived else None, reason="checked downstream")
            elif run.status == "needs_attention" and resolve_in_doubt and \
                    (run.attention or {}).get("kind") == "crash_loop":
                # the test itself killed this run's worker three times in one step
                services.run_resume(run_id=run.id, user="test-operator",
                                    reason="the kills were ours")
        return all(r.status in ("succeeded", "failed", "cancelled") for r in runs) and \
            len(runs) == len(run_ids)

    try:
        wait_until(all_final, timeout, interval=0.2, message=f"runs {run_ids} to finish")
    except AssertionError as exc:
        states = list(Run.objects.filter(pk__in=run_ids).values_list(
            "id", "status", "step_no", "lease_owner", "lease_expires_at", "enqueued_at",
            "attention"))
        raise AssertionError(f"{exc}; runs now: {states}") from None
    return {r.id: r for r in Run.objects.filter(pk__in=run_ids)}


def assert_consistent(run):
    """Events contiguous from 1; no live effect off the run's lineage (its branch, and the
    branches it was forked from up to each fork's step)."""
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1)), f"event gap or duplicate in {run.id}"
    assert seqs[-1] == run.event_seq
    live = Effect.objects.filter(run=run, superseded=False).exclude(branch=run.branch)
    lineage = _lineage(run)
    dead = [(e.branch, e.step_no, e.seq) for e in live
            if e.branch not in lineage or e.step_no > lineage[e.branch]]
    assert not dead, f"live effects on a dead branch: {dead}"


def _lineage(run) -> dict[int, int]:
    """branch -> the last step of it the run's live branch descends from."""
    checkpoints = {c.number: c for c in Checkpoint.objects.filter(run=run)}
    lineage, branch = {}, run.branch
    while True:
        first = min((c for c in checkpoints.values() if c.branch == branch),
                    key=lambda c: c.number, default=None)
        parent = checkpoints.get(first.parent_number) if first and first.parent_number else None
        if parent is None or parent.branch in lineage or parent.branch == run.branch:
            return lineage
        lineage[parent.branch] = min(lineage.get(parent.branch, parent.step_no), parent.step_no)
        branch = parent.branch


def assert_outside_world_clean(run_ids):
    units = Record.objects.filter(unit__regex=r"^(" + "|".join(run_ids) + r")-")
    per_unit = Counter(units.values_list("unit", flat=True))
    duplicates = {u: n for u, n in per_unit.items() if n > 1}
    assert not duplicates, f"the same unit of work reached the target twice: {duplicates}"
    notes = (Notification.objects.filter(unit__in=[f"{i}-done" for i in run_ids])
             .values("unit").annotate(n=Count("id")).filter(n__gt=1))
    assert not notes.exists(), f"a non-idempotent call ran twice: {list(notes)}"
    return per_unit


def holder_pid(run_id):
    owner = Run.objects.filter(pk=run_id).values_list("lease_owner", flat=True).first()
    return int(owner.split(":")[1]) if owner else None
