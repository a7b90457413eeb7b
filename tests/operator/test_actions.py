"""Each operator action through its view, on runs executed in this process: the run's
status, events and audit entries match what was done; a refusal changes nothing."""

import json

import pytest

from runs.models import AuditEntry, Effect, Run, RunEvent
from tests.operator import agents
from tests.operator.conftest import drive, edit_state, in_doubt_run, launch

pytestmark = pytest.mark.django_db


def state_of(run_id):
    run = Run.objects.get(pk=run_id)
    return (run.status, run.branch, run.event_seq, run.epoch, AuditEntry.objects.count())


def messages_of(response):
    return [str(m) for m in response.context["messages"]] if response.context else []


def act(ops, run, action, reason="because", follow=True):
    return ops.post(f"/ops/runs/{run.pk}/act/", {"action": action, "reason": reason},
                    follow=follow)


def audit_events(run):
    return [(e.data["action"], e.data["reason"])
            for e in RunEvent.objects.filter(run=run, kind="audit").order_by("seq")]


def test_pause_resume_cancel_with_reasons(ops, users):
    run = launch(users["alice"], steps=3)
    act(ops, run, "pause", "deploy window")
    assert Run.objects.get(pk=run.pk).status == "paused"
    response = act(ops, run, "resume", "deploy done")
    assert "Resumed." in messages_of(response)
    assert Run.objects.get(pk=run.pk).status == "queued"
    act(ops, run, "cancel", "not needed")
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    entries = list(AuditEntry.objects.filter(run=run).order_by("created_at", "id"))
    assert [(e.action, e.reason, e.before["status"], e.after["status"]) for e in entries] == [
        ("pause", "deploy window", "queued", "paused"),
        ("resume", "deploy done", "paused", "queued"),
        ("cancel", "not needed", "queued", "cancelled")]
    assert audit_events(run) == [("pause", "deploy window"), ("resume", "deploy done"),
                                 ("cancel", "not needed")]


def test_a_reason_is_required_and_nothing_changes_without_one(ops, users):
    run = launch(users["alice"])
    before = state_of(run.pk)
    response = act(ops, run, "pause", reason="   ")
    assert any("Give a reason" in m for m in messages_of(response))
    assert state_of(run.pk) == before


def test_an_engine_refusal_is_shown_and_changes_nothing(ops, users):
    run = launch(users["alice"], steps=1)
    drive(run.pk)
    before = state_of(run.pk)
    response = act(ops, run, "resume")
    assert "cannot resume a run that is succeeded" in " ".join(messages_of(response))
    assert state_of(run.pk) == before
    assert ops.get("/ops/runs/nope/").status_code == 404


def test_retry_a_failed_run_from_its_last_checkpoint(ops, users):
    run = launch(users["alice"], agent="flaky")
    assert drive(run.pk) == "failed"
    page = ops.get(f"/ops/runs/{run.pk}/").content.decode()
    assert "the downstream API said no" in page and "Traceback" in page
    agents.FLAKY["fail"] = False
    act(ops, run, "retry", "the API is back")
    assert Run.objects.get(pk=run.pk).status == "queued"
    assert drive(run.pk) == "succeeded"
    assert Run.objects.get(pk=run.pk).output == {"steps": 3}


def test_rollback_preview_then_confirm(ops, users):
    run = launch(users["alice"], steps=3)
    drive(run.pk)  # checkpoints: 1 start, 2 after step 1, 3 after step 2 (then done)
    preview = ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=2")
    assert preview.status_code == 200
    body = preview.content.decode()
    p = preview.context["preview"]
    assert p["steps_undone"] == 2
    assert {(t["tool"].rsplit(".", 1)[1], t["calls"], t["not_idempotent"], t["reached"])
            for t in p["by_tool"]} == {("write_entry", 2, 0, 0), ("charge", 2, 2, 2)}
    for effect in p["effects"]:
        assert effect["key"] in body
    # no reason: nothing happens
    before = state_of(run.pk)
    refused = ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 2, "reason": ""})
    assert refused.status_code == 400 and state_of(run.pk) == before
    done = ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 2, "reason": "bad data", "then": "resume"})
    assert done.status_code == 302
    run.refresh_from_db()
    assert (run.status, run.branch, run.step_no) == ("queued", 2, 1)
    entry = AuditEntry.objects.get(run=run, action="rollback")
    assert entry.reason == "bad data" and entry.after["checkpoint"] == 2


def test_rollback_to_a_missing_checkpoint_is_refused(ops, users):
    run = launch(users["alice"], steps=1)
    drive(run.pk)
    before = state_of(run.pk)
    response = ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=99")
    assert response.status_code == 400 and "no checkpoint number 99" in response.content.decode()
    response = ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 99, "reason": "x", "then": "resume"})
    assert response.status_code == 409 and state_of(run.pk) == before


@pytest.mark.parametrize("resolution,charges", [("done", 4), ("retry", 5), ("skip", 4)])
def test_resolve_an_in_doubt_effect(ops, users, resolution, charges):
    run = in_doubt_run(users["alice"], charges=2)  # 4 steps; the 2nd charge is in doubt
    page = ops.get(f"/ops/runs/{run.pk}/").content.decode()
    assert "In-doubt effect" in page and run.attention["key"] in page
    response = ops.post(f"/ops/runs/{run.pk}/resolve/", {
        "seq": run.attention["seq"], "resolution": resolution,
        "result": json.dumps({"charged": 1, "unit": "unit-1"}), "reason": "checked the bank"},
        follow=True)
    assert "resolved" in " ".join(messages_of(response))
    assert Run.objects.get(pk=run.pk).status == "queued"
    assert drive(run.pk) == "succeeded"
    assert agents.CALLS["charge"] == charges  # done/skip: never repeated; retry: once more
    effect = Effect.objects.get(key=run.attention["key"])
    assert effect.status == "done"
    # a retried call logs a fresh outcome; the resolution stays in its event and the audit
    assert effect.resolution == ("" if resolution == "retry" else resolution)
    assert RunEvent.objects.filter(run=run, kind="effect", data__resolution=resolution).exists()
    entry = AuditEntry.objects.get(run=run, action="resolve")
    assert entry.after["resolution"] == resolution and entry.reason == "checked the bank"


def test_resolve_refusals_change_nothing(ops, users):
    run = in_doubt_run(users["alice"])
    before = state_of(run.pk)
    url = f"/ops/runs/{run.pk}/resolve/"
    bad_json = ops.post(url, {"seq": run.attention["seq"], "resolution": "done",
                              "result": "{nope", "reason": "r"}, follow=True)
    assert any("Not valid JSON" in m for m in messages_of(bad_json))
    wrong_seq = ops.post(url, {"seq": 7, "resolution": "done", "reason": "r"}, follow=True)
    assert any("no in-doubt effect" in m for m in messages_of(wrong_seq))
    assert state_of(run.pk) == before
    # and a plain resume is refused while the effect is in doubt
    resumed = act(ops, run, "resume")
    assert any("resolve the in-doubt effect first" in m for m in messages_of(resumed))
    assert state_of(run.pk) == before


def test_edit_state_makes_a_new_branch_left_paused(ops, users):
    run = launch(users["alice"], steps=4)
    act(ops, run, "pause", "inspect")  # queued → paused at once
    drive(run.pk)  # nothing to do: paused
    run = Run.objects.get(pk=run.pk)
    # give it a checkpoint first: resume, run one step, pause by hand
    act(ops, run, "resume", "go")
    crash_free = drive(run.pk)
    assert crash_free == "succeeded"
    run.refresh_from_db()
    editor = ops.get(f"/ops/runs/{run.pk}/state/")
    assert editor.status_code == 200 and "&quot;total&quot;" in editor.content.decode()
    url = f"/ops/runs/{run.pk}/state/"
    before = state_of(run.pk)
    base = {"checkpoint": editor.context["checkpoint"].number, "op": "replace", "reason": "fix",
            "confirm": "1"}
    for bad, error in [({"path": "/i", "value": "{not json"}, "Not valid JSON"),
                       ({"path": "", "value": "[1, 2]"}, "must stay a JSON object"),
                       ({"path": "/i", "value": ""}, "Give the new value")]:
        response = ops.post(url, {**base, **bad})
        assert response.status_code == 400 and error in response.content.decode(), bad
    assert state_of(run.pk) == before
    patch = [{"op": "replace", "path": "/i", "value": 2}, {"op": "replace", "path": "/total",
                                                          "value": 1000}]
    assert edit_state(ops, run.pk, patch, "skip ahead").status_code == 302
    run.refresh_from_db()
    assert (run.status, run.branch) == ("paused", 2)
    act(ops, run, "resume", "continue")
    assert drive(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.output == {"entries": 4, "total": 1000 + 2 + 3}
    assert [e.action for e in AuditEntry.objects.filter(run=run).order_by("created_at", "id")] == [
        "pause", "resume", "edit_state", "resume"]


def test_edit_state_of_a_running_run_is_refused(ops, users):
    run = launch(users["alice"], steps=3)
    drive(run.pk)
    Run.objects.filter(pk=run.pk).update(status="running", lease_owner="h:1:t")
    before = state_of(run.pk)
    response = edit_state(ops, run.pk, [{"op": "replace", "path": "/i", "value": 0}], "x")
    assert response.status_code == 409 and "pause it first" in response.content.decode()
    assert state_of(run.pk) == before


def test_bulk_actions_on_50_runs(ops, users):
    runs = [launch(users["alice" if i % 2 else "bob"], steps=2) for i in range(50)]
    ids = [r.pk for r in runs]
    for action, status in [("pause", "paused"), ("resume", "queued"), ("cancel", "cancelled")]:
        response = ops.post("/ops/runs/bulk/", {"action": action, "reason": f"bulk {action}",
                                                "run": ids, "next": "/ops/?status=queued"})
        assert response.status_code == 302 and response["Location"] == "/ops/?status=queued"
        assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {status}
        assert AuditEntry.objects.filter(action=action, reason=f"bulk {action}").count() == 50
    before = [state_of(i) for i in ids]
    response = ops.post("/ops/runs/bulk/", {"action": "resume", "reason": "again", "run": ids},
                        follow=True)
    text = " ".join(messages_of(response))
    assert "resume: 0 of 50 run(s) done." in text and "50 refused" in text
    assert [state_of(i) for i in ids] == before


def test_bulk_needs_runs_and_a_reason(ops, users):
    run = launch(users["alice"])
    before = state_of(run.pk)
    response = ops.post("/ops/runs/bulk/", {"action": "pause", "reason": "", "run": [run.pk]},
                        follow=True)
    assert any("Give a reason" in m for m in messages_of(response))
    response = ops.post("/ops/runs/bulk/", {"action": "pause", "reason": "r"}, follow=True)
    assert any("Select at least one run" in m for m in messages_of(response))
    assert state_of(run.pk) == before


def test_the_live_poll_says_nothing_until_something_happens(ops, users):
    run = launch(users["alice"], steps=2)
    page = ops.get(f"/ops/runs/{run.pk}/")
    after, token = page.context["last_seq"], page.context["token"]
    url = f"/ops/runs/{run.pk}/live/?after={after}&token={token}"
    assert ops.get(url).status_code == 204
    act(ops, run, "pause", "now")
    live = ops.get(url)
    body = live.content.decode()
    assert live.status_code == 200
    assert 'hx-swap-oob="beforeend:#events"' in body and "charlie pause" in body
    assert 'id="run-controls"' in body  # the course changed: new controls
    assert f"after={Run.objects.get(pk=run.pk).event_seq}" in body
