"""Logging out ends the live socket a page already has open: Chromium on a real Daphne.

The run page is open and live; the same session logs out, and the page's socket is
closed and its reconnect refused, so no later event of the run reaches it. With
Redis the logout is made by another process (this one), so the news crosses processes
through Redis; without Redis it is made in a second tab, through the same Daphne.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client

from runs import services
from tests.support.processes import wait_until
from tests.web.conftest import drive, log_in

pytestmark = [pytest.mark.browser, pytest.mark.services]


def test_logout_closes_the_open_page_socket(users, server, browser_context):
    run = drive(services.run_launch(user=users["alice"], agent="ticker",
                                    inputs={"steps": 2, "delay": 0}).pk)
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/runs/{run.pk}/")
    page.wait_for_selector('#live-indicator[data-state="live"]')

    if settings.REDIS_URL:  # another process than the page's Daphne
        cookie = next(c for c in browser_context.cookies() if c["name"] == "sessionid")
        client = Client()
        client.cookies["sessionid"] = cookie["value"]
        # in a thread of its own: Playwright keeps an event loop in this one
        def log_out():
            try:
                return client.post("/logout/")
            finally:
                connections.close_all()

        with ThreadPoolExecutor(1) as thread:
            assert thread.submit(log_out).result().status_code == 302
    else:
        other = browser_context.new_page()
        other.goto(f"{server.url}/runs/")
        other.click(".userbox button[type=submit]")
        other.wait_for_url(f"{server.url}/login/**")

    # The socket is closed; the page reconnects, and the handshake is refused (a refused
    # handshake reaches the page as a failed connection: it keeps "reconnecting").
    page.wait_for_selector('#live-indicator:not([data-state="live"])', state="attached")
    path = f"/ws/runs/{run.pk}/"
    wait_until(lambda: f'"WSREJECT {path}"' in server.output(), 30,
               message="the reconnect refused")
    assert page.get_attribute("#live-indicator", "data-state") != "live"
