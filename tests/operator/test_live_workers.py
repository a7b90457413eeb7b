"""Operator actions against runs on real worker trees: pause takes effect within
2 s at the next effect boundary, and resume, roll back, edit state, cancel and the
resolution of an in-doubt effect (after a worker was SIGKILLed) all land, with
events and audit entries that match what was done."""

import json

import pytest

from runs import services
from runs.models import AuditEntry, Effect, Run, RunEvent
from tests.operator.conftest import edit_state
from tests.support.processes import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
AGENTS = "tests.workload_agents,tests.operator.agents"


def status(run_id):
    return Run.objects.get(pk=run_id).status


def act(ops, run_id, action, reason):
    response = ops.post(f"/ops/runs/{run_id}/act/", {"action": action, "reason": reason})
    assert response.status_code == 302


def audit_trail(run_id):
    return [(e.action, e.reason) for e in AuditEntry.objects.filter(run_id=run_id)
            .order_by("created_at", "id")]


def audit_events(run_id):
    return [(e.data["action"], e.data["reason"]) for e in
            RunEvent.objects.filter(run_id=run_id, kind="audit").order_by("seq")]


def test_controls_on_running_runs(start_cluster, ops, users):
    cluster = start_cluster(workers=2, AGENTOPS_AGENT_MODULES=AGENTS)
    run = services.run_launch(user=users["alice"], agent="ledger",
                              inputs={"steps": 400, "delay": 0.05, "charge": False})
    wait_until(lambda: Run.objects.get(pk=run.pk).step_no >= 3, 30, message="three steps")

    # pause: at the next effect boundary (its latency is bench/ops_pause_latency.py's)
    act(ops, run.pk, "pause", "look at it")
    wait_until(lambda: status(run.pk) == "paused", 30, 0.02, message="paused")
    paused_at = Run.objects.get(pk=run.pk).step_no
    # The pause and the release are one commit; once every worker is idle again, nothing
    # holds the run, and only a claim (which skips a paused run) could move it on.
    wait_until(lambda: len(cluster.idle_workers()) == 2, 30, 0.02, message="the workers idle")
    paused = Run.objects.get(pk=run.pk)
    assert (paused.status, paused.lease_owner) == ("paused", None)
    assert paused.step_no == paused_at, "a paused run made progress"

    # resume: it goes on from where it stopped
    act(ops, run.pk, "resume", "looks fine")
    wait_until(lambda: Run.objects.get(pk=run.pk).step_no >= paused_at + 3, 20,
               message="progress after resume")

    # roll back a running run to checkpoint 3 (after step 2): a new branch with new keys
    response = ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=3")
    assert response.status_code == 200 and response.context["preview"]["steps_undone"] >= 3
    response = ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 3, "reason": "redo", "then": "resume"})
    assert response.status_code == 302
    wait_until(lambda: Effect.objects.filter(run_id=run.pk, branch=2).count() >= 3, 20,
               message="progress on the new branch")
    old = Effect.objects.filter(run_id=run.pk, branch=1, step_no__gt=2)
    assert old.exists() and not old.filter(superseded=False).exists()
    assert not Effect.objects.filter(run_id=run.pk, branch=2, key__contains=f"{run.pk}:1:").exists()

    # edit the state: pause first, then jump ahead so that it finishes soon
    act(ops, run.pk, "pause", "edit")
    wait_until(lambda: status(run.pk) == "paused", 2.0, 0.02, message="paused again")
    patch = [{"op": "replace", "path": "/i", "value": 395},
             {"op": "replace", "path": "/total", "value": -1}]
    response = edit_state(ops, run.pk, patch, "skip ahead")
    assert response.status_code == 302
    act(ops, run.pk, "resume", "finish")
    wait_until(lambda: status(run.pk) == "succeeded", 30, message="finished")
    finished = Run.objects.get(pk=run.pk)
    assert finished.branch == 3
    assert finished.output == {"entries": 400, "total": -1 + sum(range(395, 400))}

    expected = [("pause", "look at it"), ("resume", "looks fine"), ("rollback", "redo"),
                ("pause", "edit"), ("edit_state", "skip ahead"), ("resume", "finish")]
    assert audit_trail(run.pk) == expected
    assert audit_events(run.pk) == expected  # and every open page saw each one
    statuses = [e.data.get("status") for e in RunEvent.objects.filter(run_id=run.pk, kind="status")
                .order_by("seq")]
    assert statuses.count("paused") >= 2 and statuses[-1] == "succeeded"

    # cancel: a second run, cancelled while it runs
    other = services.run_launch(user=users["bob"], agent="ledger",
                                inputs={"steps": 400, "delay": 0.05, "charge": False})
    wait_until(lambda: status(other.pk) == "running", 20, message="second run running")
    act(ops, other.pk, "cancel", "not needed")
    wait_until(lambda: status(other.pk) == "cancelled", 2.0, 0.02, message="cancelled within 2 s")
    assert audit_trail(other.pk) == [("cancel", "not needed")]


def test_resolve_an_in_doubt_effect_after_a_worker_was_killed(start_cluster, faults_dir, ops,
                                                             users):
    start_cluster(workers=2, AGENTOPS_AGENT_MODULES=AGENTS)
    (faults_dir / "after_effect_before_log").write_text("kill@charger")
    run = services.run_launch(user=users["alice"], agent="charger", inputs={"steps": 3})
    wait_until(lambda: status(run.pk) == "needs_attention", 30, message="in doubt")
    run.refresh_from_db()
    assert run.attention["kind"] == "in_doubt" and run.attention["step_no"] == 1
    page = ops.get("/ops/attention/").content.decode()
    assert run.attention["key"] in page and "In-doubt effect" in page
    response = ops.post(f"/ops/runs/{run.pk}/resolve/", {
        "seq": run.attention["seq"], "resolution": "done", "reason": "the bank shows it",
        "result": json.dumps({"charged": 0, "unit": "unit-0"})})
    assert response.status_code == 302
    wait_until(lambda: status(run.pk) == "succeeded", 30, message="finished after resolve")
    effect = Effect.objects.get(key=run.attention["key"])
    assert (effect.status, effect.resolution, effect.attempts) == ("done", "done", 0)
    assert Effect.objects.filter(run_id=run.pk, kind="call").count() == 3  # nothing repeated
    assert audit_trail(run.pk) == [("resolve", "the bank shows it")]
