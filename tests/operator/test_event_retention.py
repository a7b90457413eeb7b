"""Event and effect retention (runs/storage/event_retention.py): N days after a run ended,
its events but its status events, and its effects but the metered ones, those acted on
and those a resume reads, are deleted in batches; the run row says what went, and a run
that is not ended (or no longer) is never touched."""

import json
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agentops.environment import env_retention_days
from runs import services
from runs.budgets.models import Approval
from runs.durable import records as r
from runs.models import Effect, Run, RunEvent
from runs.storage import event_retention, retention
from runs.storage.event_retention import Policy, due_runs, prune
from runs.webhooks.dispatch import dispatch
from runs.webhooks.models import Delivery, Subscription
from tests.operator import agents
from tests.operator.conftest import drive, launch

pytestmark = pytest.mark.django_db
POLICY = Policy(days=30, batch=3)
NOT_ENDED = [r.QUEUED, r.RUNNING, r.PAUSED, r.WAITING, r.NEEDS_ATTENTION]


def ended(user, steps=4, agent="ledger") -> Run:
    run = launch(user, agent, steps=steps) if agent == "ledger" else launch(user, agent)
    drive(run.pk)
    return Run.objects.get(pk=run.pk)


def age(run, days=31) -> None:
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=days))


def events(run) -> list[tuple[int, str]]:
    return list(RunEvent.objects.filter(run_id=run.pk).order_by("seq").values_list("seq", "kind"))


def positions(run) -> set[tuple[int, int, int]]:
    return set(Effect.objects.filter(run_id=run.pk).values_list("branch", "step_no", "seq"))


def mark_kept_effects(run) -> set[tuple[int, int, int]]:
    """Steps 1-3 of a ledger run: one metered call, one resolved in doubt, one a person
    answered, one an approval was asked for. Step 4, after the last checkpoint, is what
    a resume would replay."""
    at = Effect.objects.filter(run_id=run.pk).get
    Effect.objects.filter(run_id=run.pk, step_no=1, seq=0).update(
        usage={"model": "scripted", "cost": 0.01, "prompt_tokens": 3, "completion_tokens": 4})
    Effect.objects.filter(run_id=run.pk, step_no=1, seq=1).update(resolution="done")
    Effect.objects.filter(run_id=run.pk, step_no=2, seq=0).update(kind="input")
    Approval.objects.create(id="appr-1", run_id=run.pk, key=at(step_no=3, seq=1).key,
                            digest="d", tool="charge")
    return {(1, 1, 0), (1, 1, 1), (1, 2, 0), (1, 3, 1), (1, 4, 0), (1, 4, 1)}


def test_deletes_all_but_status_events_and_the_effects_still_read(users):
    run = ended(users["alice"])
    kept = mark_kept_effects(run)
    statuses = [seq for seq, kind in events(run) if kind == "status"]
    before_events, before_effects = len(events(run)), len(positions(run))
    age(run)
    report = prune(policy=POLICY)
    assert events(run) == [(seq, "status") for seq in statuses]
    assert positions(run) == kept
    run.refresh_from_db()
    assert run.events_pruned == before_events - len(statuses) == report.events
    assert run.effects_pruned == before_effects - len(kept) == report.effects == 2
    assert run.events_pruned_before == run.event_seq + 1 and run.pruned_at is not None
    assert report.per_run == {run.pk: {"events": run.events_pruned, "effects": 2}}
    # batches of 3 rows: one of effects, ceil(28 / 3) = 10 of event numbers
    assert report.batches == 1 + -(-run.event_seq // 3)
    # the run row, its status, output and usage stay
    assert run.status == r.SUCCEEDED and run.output == {"entries": 4, "total": 6}


def test_twice_deletes_nothing_more_and_the_run_is_no_longer_due(users):
    run = ended(users["alice"])
    age(run)
    assert prune(policy=POLICY).events > 0
    cutoff = timezone.now() - timedelta(days=30)
    assert list(due_runs(cutoff)) == []
    again = prune(policy=POLICY)
    assert (again.runs, again.events, again.effects, again.batches) == (0, 0, 0, 0)


def test_two_trees_interleaving_their_batches_delete_each_row_once(users):
    """Two passes over the same run, batch by batch in turn, as two trees' mains would:
    each batch locks the run row and reads where the other left off."""
    run = ended(users["alice"], steps=6)
    total_events = len([kind for _, kind in events(run) if kind != "status"])
    total_effects = len(positions(run)) - 2  # step 6's, after the last checkpoint
    age(run)
    cutoff = timezone.now() - timedelta(days=30)
    cursors, deleted = [None, None], {"events": 0, "effects": 0}
    for turn in range(200):
        batch = event_retention.prune_batch(run.pk, cutoff, 2, cursors[turn % 2])
        if batch is None:
            break
        cursors[turn % 2] = batch.after
        deleted["events"] += batch.events
        deleted["effects"] += batch.effects
    run.refresh_from_db()
    assert deleted == {"events": total_events, "effects": total_effects}
    assert (run.events_pruned, run.effects_pruned) == (total_events, total_effects)
    assert event_retention.prune_batch(run.pk, cutoff, 2, None) is None


@pytest.mark.parametrize("status", NOT_ENDED)
def test_a_run_that_is_not_ended_is_never_touched(users, status):
    """Even with a finished_at long past: a failed run resumed keeps the one it had."""
    run = ended(users["alice"])
    Run.objects.filter(pk=run.pk).update(status=status)
    age(run, days=400)
    before = (events(run), positions(run))
    assert prune(policy=POLICY).runs == 0
    assert prune(dry_run=True, policy=POLICY).runs == 0
    assert event_retention.prune_batch(run.pk, timezone.now(), 100, None) is None
    assert (events(run), positions(run)) == before


def test_within_its_days_or_with_retention_off_nothing_goes(users):
    run = ended(users["alice"])
    age(run, days=29)
    before = (events(run), positions(run))
    assert prune(policy=POLICY).runs == 0
    age(run, days=400)
    off = prune(policy=Policy(days=0))
    assert not off.enabled and off.runs == 0 and "off" in str(off)
    assert (events(run), positions(run)) == before


def test_a_run_resumed_between_two_batches_is_left_alone_from_then_on(users, monkeypatch):
    run = ended(users["alice"])
    age(run)
    one_batch = event_retention.prune_batch
    seen = []

    def then_resumed(*args):
        batch = one_batch(*args)
        if not seen:  # an operator's resume commits after the first batch
            Run.objects.filter(pk=run.pk).update(status=r.QUEUED)
        seen.append(batch)
        return batch

    monkeypatch.setattr(event_retention, "prune_batch", then_resumed)
    left = len(events(run))
    prune(policy=POLICY)
    assert len(seen) == 2 and seen[1] is None
    assert len(events(run)) == left  # the first batch took effects only
    run.refresh_from_db()
    assert run.pruned_at is None and run.events_pruned_before == 0


def test_a_failed_run_pruned_then_retried_replays_its_recorded_calls(users):
    """The failing step's calls after the last checkpoint are kept: a retry replays them
    from the log and does not call the outside world again."""
    agents.FLAKY["fail"] = True
    run = ended(users["alice"], agent="flaky")
    assert run.status == r.FAILED
    age(run)
    assert prune(policy=POLICY).events > 0
    # that pass was 60 days ago: the run ends again after it
    Run.objects.filter(pk=run.pk).update(pruned_at=timezone.now() - timedelta(days=60))
    calls = agents.CALLS["write_entry"]
    agents.FLAKY["fail"] = False
    services.run_resume(run_id=run.pk, user=users["charlie"], reason="try again")
    drive(run.pk)
    run.refresh_from_db()
    assert run.status == r.SUCCEEDED
    # step 2 (flaky-1) replayed from its record; only step 3 (flaky-2) called out
    assert agents.CALLS["write_entry"] == calls + 1
    # ended again: due again, from where the last pass stopped
    age(run)
    again = prune(policy=POLICY)
    assert again.runs == 1 and again.events > 0
    run.refresh_from_db()
    assert run.events_pruned_before == run.event_seq + 1


def test_the_pages_say_what_retention_deleted(users, ops):
    run = ended(users["alice"])
    age(run)
    prune(policy=POLICY)
    run.refresh_from_db()
    client = Client()
    client.force_login(users["alice"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    day = run.pruned_at.date().isoformat()
    assert (f"Events before #{run.event_seq + 1} were deleted on {day} by retention "
            f"({run.events_pruned} events; its status changes are kept)") in page
    assert f"{run.effects_pruned} of its effects were deleted on {day}" in page
    assert "were deleted" in ops.get(f"/ops/runs/{run.pk}/").content.decode()
    fresh = ended(users["alice"])
    assert "retention-notice" not in client.get(f"/runs/{fresh.pk}/").content.decode()


def test_webhooks_deliver_each_ended_run_once_whether_pruned_before_or_after(users):
    """The dispatcher reads status events after its cursor by id: retention keeps them,
    and deleting the others neither moves nor fools the cursor."""
    Subscription.objects.create(owner=users["alice"], url="https://hooks.example.com/x",
                                events=["run.ended"],
                                created_at=timezone.now() - timedelta(hours=1))
    later = timezone.now() + timedelta(minutes=1)  # past the dispatcher's grace
    first = ended(users["alice"])
    assert [d.run_id for d in dispatch(now=later)] == [first.pk]
    second = ended(users["alice"])
    age(first)
    age(second)
    assert prune(policy=POLICY).runs == 2
    assert [d.run_id for d in dispatch(now=later)] == [second.pk]
    assert dispatch(now=later) == []
    assert sorted(Delivery.objects.values_list("run_id", flat=True)) == sorted(
        [first.pk, second.pk])


def test_the_prune_command_applies_both_policies(users, capsys, settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "EVENT_RETENTION_DAYS": 30,
                         "RETENTION_KEEP_PER_BRANCH": 3, "RETENTION_GRACE_HOURS": 1}
    run = ended(users["alice"])
    age(run)
    before = len(events(run))
    call_command("runs", "prune", "--dry-run")
    out = capsys.readouterr().out
    assert f"would delete {before - 3} event(s) and 6 effect(s) from 1 run(s)" in out
    assert len(events(run)) == before
    call_command("runs", "prune", json=True)
    out = json.loads(capsys.readouterr().out)
    assert out["events"]["per_run"] == {run.pk: {"events": before - 3, "effects": 6}}
    assert out["checkpoints"] == 1
    assert "deleted 0 event(s)" in retention.prune_task()


@pytest.mark.parametrize(("value", "days"), [("", 30.0), ("7", 7.0), ("0", 0.0),
                                             ("off", 0.0), (" OFF ", 0.0), ("0.5", 0.5)])
def test_the_setting_reads_days_or_off(monkeypatch, value, days):
    monkeypatch.setenv("AGENTOPS_EVENT_RETENTION_DAYS", value)
    assert env_retention_days("AGENTOPS_EVENT_RETENTION_DAYS", 30.0) == days


@pytest.mark.parametrize("value", ["thirty", "-1", "nan", "inf", "1e9"])
def test_a_setting_that_is_no_number_of_days_is_refused_with_its_name(monkeypatch, value):
    monkeypatch.setenv("AGENTOPS_EVENT_RETENTION_DAYS", value)
    with pytest.raises(ImproperlyConfigured, match="AGENTOPS_EVENT_RETENTION_DAYS"):
        env_retention_days("AGENTOPS_EVENT_RETENTION_DAYS", 30.0)
