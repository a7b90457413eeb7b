"""Chromium on the schedules and webhooks pages: a schedule made through the form (a bad
cron expression first: the error is shown next to the field), a subscription with a bad
URL then a good one, and the page of a subscription whose endpoint refused then accepted.
Screenshots for the README."""

from __future__ import annotations

import pytest

import tests.workload_agents  # noqa: F401
from runs import services
from runs.durable import WorkerConfig, execute_run
from runs.schedules.models import Schedule
from runs.storage.orm import OrmStore
from runs.webhooks import sending
from runs.webhooks.dispatch import dispatch
from runs.webhooks.models import Delivery, Subscription
from tests.web.conftest import log_in, screenshot
from tests.webhooks.receiver import Receiver

pytestmark = [pytest.mark.browser, pytest.mark.services]


def finished_run(user, **inputs) -> str:
    run = services.run_launch(user=user, agent="ticker", inputs={"steps": 2, "delay": 0.01,
                                                                 **inputs})
    execute_run(OrmStore(), run.pk, WorkerConfig(owner="test:1:ab", lease_seconds=30))
    return run.pk


def test_schedules_page_create_with_an_error_then_list(users, server, browser_context):
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.click("nav.mainnav >> text=Schedules")
    page.click("text=New schedule")
    page.fill("#id_name", "nightly crawl report")
    page.select_option("#id_agent", "ticker")
    page.fill("#id_inputs", '{"steps": 5}')
    page.check("input[name=kind][value=cron]")
    page.fill("#id_cron", "0 25 * * *")
    page.click("button:text('Create schedule')")
    page.wait_for_selector(".field.has-error .field-error")
    assert "not a valid cron expression" in page.text_content(".field.has-error")
    assert not Schedule.objects.exists()
    page.fill("#id_cron", "0 3 * * *")
    page.click("button:text('Create schedule')")
    page.wait_for_selector("text=Recent launches")
    services_data = {"agent": "ticker", "inputs": {"steps": 20}, "kind": "interval",
                     "interval_seconds": 900, "overlap": "queue"}
    from runs.schedules import services as schedule_services

    schedule_services.schedule_create(user=users["alice"],
                                      data={"name": "quarter-hourly sync", **services_data})
    schedule_services.schedule_create(user=users["alice"], data={
        "name": "paused backfill", "agent": "ticker", "inputs": {}, "kind": "cron",
        "cron": "*/5 * * * *", "overlap": "allow", "paused": True})
    from datetime import timedelta

    from django.utils import timezone

    from runs.schedules.tick import tick

    # the quarter-hourly one's slot (the nightly one's 03:00 may fall in it too)
    [launch] = [one for one in tick(timezone.now() + timedelta(minutes=16))
                if one.schedule.name == "quarter-hourly sync"]
    page.goto(f"{server.url}/schedules/")
    assert page.locator(f"#schedules a[href='/runs/{launch.run_id}/']").count() == 1
    rows = page.locator("#schedules tbody tr")
    assert rows.count() == 3
    assert "cron 0 3 * * *" in page.text_content("#schedules")
    screenshot(page, "schedules")


def test_subscription_page_shows_refused_then_accepted_attempts(users, server, browser_context):
    receiver = Receiver()
    try:
        page = browser_context.new_page()
        log_in(page, server.url, "alice", "alice-pass-1")
        page.goto(f"{server.url}/webhooks/new/")
        page.fill("#id_url", "ftp://files.example.com/drop")
        page.click("button:text('Subscribe')")
        page.wait_for_selector(".field.has-error .field-error")
        assert "only http:// and https://" in page.text_content(".field.has-error")
        assert not Subscription.objects.exists()
        page.fill("#id_url", receiver.url)
        page.fill("#id_description", "team chat bridge")
        page.check("input[name=events][value='run.needs_attention']")
        page.click("button:text('Subscribe')")
        page.wait_for_selector("#signing-secret")
        sub = Subscription.objects.get()
        assert page.text_content("#signing-secret") == sub.secret

        for _ in range(2):
            finished_run(users["alice"])
        dispatch()
        for delivery in Delivery.objects.filter(subscription=sub):
            for _ in range(2):
                try:
                    sending.attempt(delivery.pk)
                except sending.EndpointFailed:
                    pass
        receiver.refusing = False
        first = Delivery.objects.filter(subscription=sub).order_by("pk").first()
        sending.attempt(first.pk)
        page.reload()
        assert page.locator(".delivery[data-status=delivered]").count() == 1
        assert page.locator(".delivery[data-status=pending]").count() == 1
        assert "HTTP 503" in page.text_content(".delivery[data-status=delivered]")
        assert "HTTP 200" in page.text_content(".delivery[data-status=delivered]")
        screenshot(page, "webhook-subscription")
    finally:
        receiver.stop()
