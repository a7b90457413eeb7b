"""Chromium on a parent's run page (docs/children.md): the Child runs panel lists the
children, follows them live (a child that ends shows as succeeded once its parent is
woken), and the first child's page links back to its parent."""

from __future__ import annotations

import pytest

from runs.models import Run
from tests.web.conftest import drive, log_in, new_context, screenshot, wait_caught_up

pytestmark = [pytest.mark.browser, pytest.mark.services]

LIVE = '#live-indicator[data-state="live"]'


def test_the_tree_on_the_run_page_follows_the_children(users, server, browser,
                                                       launch_and_drive):
    parent = launch_and_drive("fan_out", {"children": 3, "cap": 2, "steps": 1, "delay": 0,
                                          "child": "ticker"})
    first, second = Run.objects.filter(parent=parent).order_by("created_at")
    context = new_context(browser, viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/runs/{parent.pk}/")
    page.wait_for_selector(LIVE)
    assert page.locator("#run-children tbody tr").count() == 2  # the cap: two at once
    assert page.inner_text("#waiting-children").startswith("Waiting, without a worker, for 2")

    drive(first.pk)  # ends, and wakes the parent, which spawns the third child
    drive(parent.pk)
    wait_caught_up(page, parent.pk)  # the parent's events applied, its children panel redrawn
    assert page.locator(f'#run-children tr[data-child="{first.pk}"] .status-succeeded').count() == 1
    assert page.locator("#run-children tbody tr").count() == 3
    screenshot(page, "run-page-children")

    page.click(f'#run-children tr[data-child="{second.pk}"] a')
    page.wait_for_selector("#run-parent")
    assert page.get_attribute("#run-parent a", "href") == f"/runs/{parent.pk}/"
    assert errors == []
    context.close()
