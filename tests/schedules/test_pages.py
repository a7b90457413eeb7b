"""Schedule pages: bad input is a form error (422) that changes nothing; a user sees
only their own schedules, an operator all; a run launched by a schedule says so."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import tests.workload_agents  # noqa: F401
from runs.schedules import services
from runs.schedules.models import Schedule
from runs.schedules.tick import tick

GOOD = {"name": "nightly", "agent": "ticker", "inputs": '{"steps": 2}', "kind": "cron",
        "cron": "0 3 * * *", "interval_seconds": "", "overlap": "skip"}


@pytest.fixture
def logged_in():
    from django.test import Client

    def make(user):
        client = Client()
        client.force_login(user)
        return client
    return make


@pytest.mark.django_db
def test_create_edit_pause_and_resume_a_schedule(users, logged_in):
    alice = logged_in(users["alice"])
    response = alice.post("/schedules/new/", GOOD)
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    assert (schedule.owner, schedule.agent, schedule.inputs, schedule.cron) == \
        (users["alice"], "ticker", {"steps": 2}, "0 3 * * *")
    assert schedule.next_at.hour == 3 and schedule.next_at.minute == 0
    page = alice.get("/schedules/").content.decode()
    assert "nightly" in page and "cron 0 3 * * *" in page
    response = alice.post(f"/schedules/{schedule.pk}/", {**GOOD, "kind": "interval", "cron": "",
                                                          "interval_seconds": "90"})
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert (schedule.kind, schedule.interval_seconds, schedule.cron) == ("interval", 90, "")
    assert alice.post(f"/schedules/{schedule.pk}/pause/", {"paused": "1"}).status_code == 302
    schedule.refresh_from_db()
    assert schedule.paused and schedule.next_at is None
    alice.post(f"/schedules/{schedule.pk}/pause/", {"paused": "0"})
    schedule.refresh_from_db()
    assert not schedule.paused and schedule.next_at is not None


BAD = [
    ({"cron": "61 * * * *"}, "cron", "not a valid cron expression"),
    ({"cron": "every day"}, "cron", "five fields"),
    ({"cron": "* * 31 2 *"}, "cron", "not a valid cron expression"),
    ({"cron": ""}, "cron", "required"),
    ({"cron": "* * * * *\x00"}, "cron", ""),
    ({"kind": "interval", "interval_seconds": "0"}, "interval_seconds", "greater than or equal"),
    ({"kind": "interval", "interval_seconds": "-5"}, "interval_seconds", ""),
    ({"kind": "interval", "interval_seconds": "soon"}, "interval_seconds", "whole number"),
    ({"kind": "interval", "interval_seconds": ""}, "interval_seconds", "required"),
    ({"kind": "interval", "interval_seconds": "99999999999"}, "interval_seconds", ""),
    ({"kind": "weekly"}, "kind", "valid choice"),
    ({"inputs": '{"steps": "many"}'}, "inputs", "is not of type"),
    ({"inputs": '{"steps": 0}'}, "inputs", "minimum"),
    ({"inputs": "[1, 2]"}, "inputs", "JSON object"),
    ({"inputs": "{not json"}, "inputs", ""),
    ({"inputs": '{"steps": 1e999}'}, "inputs", ""),
    ({"agent": "no-such-agent"}, "agent", "valid choice"),
    ({"agent": "webhook_delivery", "inputs": '{"delivery": 1}'}, "agent", "valid choice"),
    ({"overlap": "sometimes"}, "overlap", "valid choice"),
    ({"name": ""}, "name", "required"),
    ({"name": "x" * 101}, "name", "at most 100"),
]


@pytest.mark.django_db
def test_bad_input_is_a_form_error_and_saves_nothing(users, logged_in):
    alice = logged_in(users["alice"])
    schedule = services.schedule_create(user=users["alice"], data={
        "name": "kept", "agent": "ticker", "inputs": {}, "kind": "cron", "cron": "*/5 * * * *"})
    for change, field, message in BAD:
        response = alice.post("/schedules/new/", {**GOOD, **change})
        assert response.status_code == 422, change
        errors = response.context["form"].errors
        assert field in errors, (change, errors)
        assert message in " ".join(errors[field]), (change, errors)
        assert Schedule.objects.count() == 1
        # the same on an edit: the stored schedule is unchanged
        response = alice.post(f"/schedules/{schedule.pk}/", {**GOOD, **change})
        assert response.status_code == 422, change
        schedule.refresh_from_db()
        assert (schedule.name, schedule.cron, schedule.inputs) == ("kept", "*/5 * * * *", {})


@pytest.mark.django_db
def test_a_user_sees_only_their_own_schedules_an_operator_all(users, logged_in):
    theirs = services.schedule_create(user=users["alice"], data={
        "name": "alices", "agent": "ticker", "inputs": {}, "kind": "cron", "cron": "* * * * *"})
    bob = logged_in(users["bob"])
    assert "alices" not in bob.get("/schedules/").content.decode()
    for url in (f"/schedules/{theirs.pk}/", f"/schedules/{theirs.pk}/pause/",
                f"/schedules/{theirs.pk}/delete/"):
        assert bob.post(url, {**GOOD, "paused": "1"}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.name == "alices" and not theirs.paused
    charlie = logged_in(users["charlie"])
    assert "alices" in charlie.get("/schedules/").content.decode()
    assert charlie.post(f"/schedules/{theirs.pk}/pause/", {"paused": "1"}).status_code == 302
    theirs.refresh_from_db()
    assert theirs.paused
    assert bob.get("/schedules/999999/").status_code == 404
    assert bob.post(f"/schedules/{theirs.pk}/pause/", {"paused": "maybe"}).status_code == 404
    alice = logged_in(users["alice"])
    response = alice.post(f"/schedules/{theirs.pk}/pause/", {"paused": "maybe"})
    assert response.status_code == 302  # refused with a message, nothing changed
    theirs.refresh_from_db()
    assert theirs.paused


@pytest.mark.django_db
def test_a_run_launched_by_a_schedule_links_back_to_it(users, logged_in):
    schedule = services.schedule_create(
        user=users["alice"], data={"name": "hourly report", "agent": "ticker", "inputs": {},
                                   "kind": "cron", "cron": "0 * * * *"},
        now=datetime(2026, 3, 2, 11, 30, tzinfo=UTC))
    [launch] = tick(datetime(2026, 3, 2, 12, 0, 5, tzinfo=UTC))
    alice = logged_in(users["alice"])
    page = alice.get(f"/runs/{launch.run_id}/").content.decode()
    assert "Launched by schedule" in page and f'href="/schedules/{schedule.pk}/"' in page
    assert "hourly report" in page
    detail = alice.get(f"/schedules/{schedule.pk}/").content.decode()
    assert f"/runs/{launch.run_id}/" in detail


@pytest.mark.django_db
def test_the_admin_uses_the_same_checks(users, client):
    admin = users["charlie"]
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    response = client.post("/admin/schedules/schedule/add/", {
        **GOOD, "owner": users["alice"].pk, "cron": "99 * * * *",
        "launches-TOTAL_FORMS": "0", "launches-INITIAL_FORMS": "0"})
    assert response.status_code == 200 and not Schedule.objects.exists()
    assert "not a valid cron expression" in response.content.decode()
    response = client.post("/admin/schedules/schedule/add/", {
        **GOOD, "owner": users["alice"].pk,
        "launches-TOTAL_FORMS": "0", "launches-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.content.decode()[:3000]
    schedule = Schedule.objects.get()
    assert schedule.owner == users["alice"] and schedule.next_at is not None
    assert client.get(f"/admin/schedules/schedule/{schedule.pk}/change/").status_code == 200
