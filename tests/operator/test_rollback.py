"""Rollback past effects: the new branch uses new keys, the old effects stay in the log
marked superseded (and are never replayed), and the run finishes."""

import pytest

from runs.models import Effect, Run
from tests.operator import agents
from tests.operator.conftest import drive, launch

pytestmark = pytest.mark.django_db


def test_rollback_forks_with_new_keys_and_supersedes_the_old_effects(ops, users):
    run = launch(users["alice"], steps=4)
    assert drive(run.pk) == "succeeded"
    old = {e.key: e for e in Effect.objects.filter(run=run, kind="call")}
    assert len(old) == 8
    response = ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 2, "reason": "redo"})
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
    ops.post(f"/ops/runs/{run.pk}/rollback/", {"checkpoint": 1, "reason": "again"})
    drive(run.pk)
    page = ops.get(f"/ops/runs/{run.pk}/").content.decode()
    assert page.count("superseded") >= 4
    assert Run.objects.get(pk=run.pk).status == "succeeded"
