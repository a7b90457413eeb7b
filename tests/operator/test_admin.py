"""The admin as the audit trail: history is read-only even for a superuser; checkpoints
are pretty-printed and diffed; audit entries export as CSV."""

import csv
import io

import pytest

from runs import services
from runs.models import AuditEntry, Checkpoint, Effect, RunEvent
from tests.operator.conftest import drive, launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-1")
    client.force_login(admin)
    return client


@pytest.fixture
def run(users):
    run = launch(users["alice"], steps=3)
    drive(run.pk)
    services.run_rollback(run_id=run.pk, checkpoint=2, user=users["charlie"],
                          reason='=HYPERLINK("x")')
    return run


def test_history_is_read_only_even_for_a_superuser(root, run):
    effect = Effect.objects.filter(run=run).first()
    event = RunEvent.objects.filter(run=run).first()
    entry = AuditEntry.objects.get(run=run)
    for model, obj in [("effect", effect), ("runevent", event), ("auditentry", entry),
                       ("run", run), ("checkpoint", Checkpoint.objects.filter(run=run).first())]:
        base = f"/admin/runs/{model}/"
        assert root.get(base).status_code == 200, model
        assert root.get(f"{base}{obj.pk}/change/").status_code == 200, model
        assert root.get(f"{base}add/").status_code == 403, model
        assert root.post(f"{base}{obj.pk}/delete/", {"post": "yes"}).status_code == 403, model
        page = root.get(f"{base}{obj.pk}/change/").content.decode()
        assert 'name="_save"' not in page, model
    before = entry.reason
    root.post(f"/admin/runs/auditentry/{entry.pk}/change/", {"reason": "rewritten"})
    entry.refresh_from_db()
    assert entry.reason == before


def test_lists_filter_and_search(root, run):
    assert run.pk[:12] in root.get(f"/admin/runs/effect/?q={run.pk}").content.decode()
    assert root.get("/admin/runs/effect/?superseded__exact=1").status_code == 200
    assert root.get("/admin/runs/auditentry/?action=rollback").status_code == 200
    page = root.get(f"/admin/runs/run/{run.pk}/change/").content.decode()
    assert f"/admin/runs/checkpoint/?run__id__exact={run.pk}" in page
    assert f"/ops/runs/{run.pk}/" in page


def test_checkpoint_state_pretty_and_diffed(root, run):
    third = Checkpoint.objects.get(run=run, number=3)
    page = root.get(f"/admin/runs/checkpoint/{third.pk}/change/").content.decode()
    assert "&quot;total&quot;: 1" in page  # pretty JSON
    assert "checkpoint 2" in page and 'class="diff-added"' in page  # diff against #2
    fork = Checkpoint.objects.get(run=run, reason="rollback")
    page = root.get(f"/admin/runs/checkpoint/{fork.pk}/change/").content.decode()
    assert "no change from checkpoint 2" in page  # diffed against what it forked from


def test_audit_entries_export_as_csv(root, run):
    entry = AuditEntry.objects.get(run=run)
    response = root.post("/admin/runs/auditentry/", {"action": "export_csv",
                                                      "_selected_action": [entry.pk]})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["created_at", "actor", "action", "run", "reason", "before", "after"]
    assert rows[1][1:4] == ["charlie", "rollback", run.pk]
    assert rows[1][4].startswith("'=")  # no formula injection into spreadsheets
