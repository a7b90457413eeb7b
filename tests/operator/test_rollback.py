"""Rollback past effects: the new branch uses new keys, the old effects stay in the log
marked superseded (and are never replayed), and the run finishes."""

import re

import pytest

from runs.models import AuditEntry, Effect, Run
from tests.operator import agents
from tests.operator.conftest import drive, launch
from tests.support.long_history import give_history

pytestmark = pytest.mark.django_db


def test_rollback_forks_with_new_keys_and_supersedes_the_old_effects(ops, users):
    run = launch(users["alice"], steps=4)
    assert drive(run.pk) == "succeeded"
    old = {e.key: e for e in Effect.objects.filter(run=run, kind="call")}
    assert len(old) == 8
    response = ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 2, "reason": "redo", "then": "resume"})
    assert response.status_code == 302
    assert drive(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.branch == 2 and run.output == {"entries": 4, "total": 6}

    effects = list(Effect.objects.filter(run=run, kind="call"))
    undone = [e for e in effects if e.branch == 1 and e.step_no > 1]
    kept = [e for e in effects if e.branch == 1 and e.step_no == 1]
    new = [e for e in effects if e.branch == 2]
    assert len(undone) == 6 and all(e.superseded for e in undone)
    assert len(kept) == 2 and not any(e.superseded for e in kept)
    assert len(new) == 6 and not any(e.superseded for e in new)
    assert {e.key for e in undone} <= set(old)  # still in the log
    assert not {e.key for e in new} & set(old)  # new keys
    assert all(f"{run.pk}:2:" in e.key for e in new)
    # the idempotent target saw each new key once, and the old ones once
    assert set(agents.LEDGER) == set(old) - {e.key for e in old.values() if "charge" in e.tool} | {
        e.key for e in new if e.tool.endswith("write_entry")}
    assert agents.CALLS["charge"] == 4 + 3  # the non-idempotent calls were done again


def test_the_run_page_shows_the_superseded_effects(ops, users):
    run = launch(users["alice"], steps=2)
    drive(run.pk)
    ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 1, "reason": "again", "then": "resume"})
    drive(run.pk)
    page = ops.get(f"/ops/runs/{run.pk}/").content.decode()
    assert page.count("superseded") >= 4
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def _state(run_id):
    run = Run.objects.get(pk=run_id)
    return (run.status, run.branch, run.epoch, run.event_seq)


def test_a_paused_run_stays_paused_after_a_rollback_unless_the_operator_resumes_it(ops, users):
    run = give_history(launch(users["alice"], steps=1), 40, status="paused")
    page = ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=5")
    assert page.status_code == 200
    assert page.context["form"]["then"].value() == "pause"
    html = page.content.decode()
    assert re.search(r'<input[^>]*value="pause"[^>]*checked', html)
    assert not re.search(r'<input[^>]*value="resume"[^>]*checked', html)

    before = _state(run.pk)
    for then in ("", "later"):  # no choice, or an unknown one: nothing happens
        refused = ops.post(f"/ops/runs/{run.pk}/rollback/",
                           {"checkpoint": 5, "reason": "redo", "then": then})
        assert refused.status_code == 400 and _state(run.pk) == before
    done = ops.post(f"/ops/runs/{run.pk}/rollback/",
                    {"checkpoint": 5, "reason": "redo", "then": "pause"})
    assert done.status_code == 302
    assert Run.objects.get(pk=run.pk).status == "paused"
    assert Run.objects.get(pk=run.pk).branch == 2
    audit = AuditEntry.objects.get(run=run, action="rollback")
    assert audit.after["then"] == "pause" and audit.after["status"] == "paused"


def test_a_rollback_that_resumes_queues_the_new_branch(ops, users):
    run = give_history(launch(users["alice"], steps=1), 40, status="paused")
    done = ops.post(f"/ops/runs/{run.pk}/rollback/",
                    {"checkpoint": 5, "reason": "redo", "then": "resume"})
    assert done.status_code == 302
    assert (Run.objects.get(pk=run.pk).status, Run.objects.get(pk=run.pk).branch) == ("queued", 2)


def test_the_preview_of_thousands_of_calls_is_a_summary_and_a_page(ops, users):
    run = give_history(launch(users["alice"], steps=1), 3000, status="paused")
    page = ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=1")
    assert page.status_code == 200
    html = page.content.decode()
    by_tool = {t["tool"]: t for t in page.context["preview"]["by_tool"]}
    assert by_tool["ledger.charge"] == {"tool": "ledger.charge", "calls": 1499,
                                        "not_idempotent": 1499, "reached": 1499}
    assert by_tool["ledger.write_entry"]["calls"] == 1499
    assert by_tool["ledger.write_entry"]["not_idempotent"] == 0
    assert '<strong id="undone-count">2998</strong>' in html
    # the first and last few, and one page of the rest: not one row per call
    assert html.count("<tr data-key=") == 5 + 5 + 25
    assert f"{run.pk}:1:2:0" in html and f"{run.pk}:1:1500:1" in html
    second = ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=1&page=2").content.decode()
    assert f"{run.pk}:1:15:0" in second and "page 2 of 120" in second
    for bad in ("x", "-1", "99999"):  # clamped to a page that exists
        assert ops.get(f"/ops/runs/{run.pk}/rollback/?checkpoint=1&page={bad}").status_code == 200
