"""Operators only: a plain user reaches no operator page or action (each tried, each
refused with nothing changed); an operator does; the admin is for staff only."""

import pytest
from django.contrib.auth.models import Group, Permission

from runs.models import AuditEntry, Run
from tests.operator.conftest import drive, in_doubt_run, launch

pytestmark = pytest.mark.django_db


def snapshot(run_id):
    run = Run.objects.get(pk=run_id)
    return (run.status, run.branch, run.event_seq, run.epoch, run.control,
            AuditEntry.objects.count(), run.checkpoints.count())


def pages(run_id):
    return ["/ops/", "/ops/?status=running", "/ops/storage/", "/ops/attention/", "/ops/workers/",
            f"/ops/runs/{run_id}/", f"/ops/runs/{run_id}/live/?after=0",
            f"/ops/runs/{run_id}/rollback/?checkpoint=1", f"/ops/runs/{run_id}/state/"]


def actions(run_id):
    reason = {"reason": "trying"}
    return [
        (f"/ops/runs/{run_id}/act/", {**reason, "action": "pause"}),
        (f"/ops/runs/{run_id}/act/", {**reason, "action": "cancel"}),
        (f"/ops/runs/{run_id}/act/", {**reason, "action": "upgrade"}),
        (f"/ops/runs/{run_id}/act/", {**reason, "action": "retry_now"}),
        (f"/ops/runs/{run_id}/act/", {**reason, "action": "give_up"}),
        (f"/ops/runs/{run_id}/rollback/", {**reason, "checkpoint": 1, "then": "resume"}),
        (f"/ops/runs/{run_id}/resolve/", {**reason, "seq": 1, "resolution": "done"}),
        (f"/ops/runs/{run_id}/state/", {**reason, "checkpoint": 1, "op": "replace", "path": "/i",
                                          "value": "0", "confirm": "1"}),
        ("/ops/runs/bulk/", {**reason, "action": "cancel", "run": [run_id]}),
    ]


def test_the_migration_makes_an_operators_group_with_the_permission(users):
    group = Group.objects.get(name="Operators")
    assert group.permissions.filter(codename="operate_run", content_type__app_label="runs").exists()
    assert users["charlie"].has_perm("runs.operate_run")
    assert not users["alice"].has_perm("runs.operate_run")


def test_a_plain_user_is_refused_every_page_and_action_and_nothing_changes(client, users):
    run = in_doubt_run(users["alice"])  # alice's own run: owning it grants nothing here
    client.force_login(users["alice"])
    before = snapshot(run.pk)
    for url in pages(run.pk):
        assert client.get(url).status_code == 403, url
    for url, data in actions(run.pk):
        assert client.post(url, data).status_code == 403, url
        assert snapshot(run.pk) == before, url


def test_anonymous_visitors_are_sent_to_log_in(client, users):
    run = launch(users["alice"])
    for url in pages(run.pk):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    before = snapshot(run.pk)
    for url, data in actions(run.pk):
        assert client.post(url, data).status_code == 302, url
    assert snapshot(run.pk) == before


def test_an_operator_reaches_every_page(ops, users):
    run = launch(users["bob"], steps=2)
    drive(run.pk)
    for url in pages(run.pk):
        assert ops.get(url).status_code == 200, url


def test_an_operator_acts_on_anyones_run(ops, users):
    run = launch(users["bob"], steps=2)
    response = ops.post(f"/ops/runs/{run.pk}/act/", {"action": "pause", "reason": "maintenance"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "paused"
    entry = AuditEntry.objects.get(run=run)
    assert (entry.actor, entry.action, entry.reason) == ("charlie", "pause", "maintenance")
    assert entry.before["status"] == "queued" and entry.after["status"] == "paused"


def test_the_permission_alone_makes_an_operator(client, users):
    """Granted directly rather than through the group: the check is the permission."""
    alice = users["alice"]
    alice.user_permissions.add(Permission.objects.get(codename="operate_run"))
    client.force_login(alice)
    assert client.get("/ops/").status_code == 200


def test_the_admin_is_for_staff_only(client, users, django_user_model):
    run = launch(users["bob"])
    for user in (users["alice"], users["charlie"]):  # an operator is not staff
        client.force_login(user)
        for url in ("/admin/", "/admin/runs/auditentry/", f"/admin/runs/run/{run.pk}/change/"):
            response = client.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-1")
    client.force_login(admin)
    assert client.get("/admin/runs/auditentry/").status_code == 200
    assert client.get(f"/admin/runs/run/{run.pk}/change/").status_code == 200


def test_the_operations_link_shows_for_operators_only(client, users):
    client.force_login(users["alice"])
    assert b'href="/ops/"' not in client.get("/").content
    client.force_login(users["charlie"])
    assert b'href="/ops/"' in client.get("/").content
