"""Retention: keep the latest N per branch plus every checkpoint an operator action
refers to; drop the rest only after the run ended and a grace period."""

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from runs.models import Checkpoint, Run
from runs.storage import retention
from tests.operator.conftest import drive, launch

pytestmark = pytest.mark.django_db
POLICY = retention.Policy(keep_per_branch=2, grace=timedelta(hours=1))


def age(run, hours=2):
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(hours=hours))


def numbers(run):
    return sorted(Checkpoint.objects.filter(run=run).values_list("number", flat=True))


def test_keeps_the_latest_per_branch_and_what_a_rollback_refers_to(ops, users):
    run = launch(users["alice"], steps=6)
    drive(run.pk)  # checkpoints 1..6 on branch 1 (start + after steps 1-5)
    ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 3, "reason": "redo", "then": "resume"})
    drive(run.pk)  # 7 = fork root (parent 3), 8..10 on branch 2
    assert numbers(run) == list(range(1, 11))
    age(run)
    report = retention.prune(policy=POLICY)
    # branch 1 keeps 5, 6 (latest) and 3 (the rollback's target); branch 2 keeps 9, 10 and 7
    assert numbers(run) == [3, 5, 6, 7, 9, 10]
    assert report.per_run == {run.pk: [1, 2, 4, 8]} and report.checkpoints == 4
    assert report.bytes > 0
    assert retention.prune(policy=POLICY).checkpoints == 0  # idempotent


def test_dry_run_and_grace_period_change_nothing(users):
    run = launch(users["alice"], steps=5)
    drive(run.pk)
    before = numbers(run)
    age(run, hours=0.5)  # within the grace period
    assert retention.prune(policy=POLICY).checkpoints == 0
    age(run, hours=2)
    dry = retention.prune(dry_run=True, policy=POLICY)
    assert dry.checkpoints == 3 and numbers(run) == before


def test_a_run_that_has_not_ended_keeps_everything(users):
    run = launch(users["alice"], steps=5)
    drive(run.pk)
    Run.objects.filter(pk=run.pk).update(status="paused",
                                         finished_at=timezone.now() - timedelta(days=3))
    assert retention.prune(policy=POLICY).checkpoints == 0


def test_the_prune_command(users, capsys, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "RETENTION_KEEP_PER_BRANCH": 1,
                         "RETENTION_GRACE_HOURS": 1}
    run = launch(users["alice"], steps=4)
    drive(run.pk)
    age(run)
    before = numbers(run)
    call_command("runs", "prune", "--dry-run")
    assert "would drop 3 checkpoint(s)" in capsys.readouterr().out
    assert numbers(run) == before
    call_command("runs", "prune", json=True)
    out = json.loads(capsys.readouterr().out)
    assert out["checkpoints"] == 3 and out["per_run"] == {run.pk: [1, 2, 3]}
    assert numbers(run) == [4]
    assert retention.prune_task().startswith("dropped 0")


def test_the_bases_of_a_kept_patch_checkpoint_are_kept():
    rows = [{"number": n, "branch": 1, "step_no": n, "parent_number": None,
             "base_number": n - 1 if n > 3 else None} for n in range(1, 7)]
    # 6 patches 5, 5 patches 4, 4 patches 3 (a full state): keeping 6 keeps 5, 4 and 3
    assert retention.kept_numbers(rows, set(), keep=1) == {3, 4, 5, 6}
