"""The API tokens page in chromium: make a token (shown once), use it, revoke it."""

from __future__ import annotations

import httpx
import pytest

from runs.api.models import ApiToken
from runs.api.tokens import digest
from runs.models import Run
from tests.web.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.services]


def test_make_use_and_revoke_a_token(users, server, browser_context):
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.click("nav >> text=API tokens")
    page.wait_for_url(f"{server.url}/account/tokens/")
    page.fill("#id_name", "nightly job")
    page.check("input[name=scopes][value=launch]")
    page.select_option("#id_days", "90")
    page.click("text=Make token")
    secret = page.text_content("#token-secret").strip()
    assert secret.startswith("aop_")
    token = ApiToken.objects.get(user=users["alice"])
    assert token.digest == digest(secret) and secret not in (token.prefix, token.digest)
    assert sorted(token.scopes) == ["launch", "read"]

    answer = httpx.get(f"{server.url}/api/v1/runs",
                       headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 200, answer.text
    page.fill("#id_name", "old laptop")
    page.click("text=Make token")
    page.wait_for_selector("#token-table tr[data-token]:nth-child(2)")
    screenshot(page, "api-tokens")  # artifacts/screenshots/: docs/screenshots/ holds a copy

    page.goto(f"{server.url}/account/tokens/")  # the secret is gone for good
    assert page.query_selector("#token-secret") is None
    page.click(f"tr[data-token='{token.pk}'] >> text=Revoke")
    page.wait_for_selector(f"tr[data-token='{token.pk}'] >> text=revoked")
    answer = httpx.get(f"{server.url}/api/v1/runs",
                       headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 401


def test_bad_token_forms_are_refused_with_a_message(users, client_for):
    client = client_for("bob")
    response = client.post("/account/tokens/", {"name": "", "scopes": ["write"], "days": "9"})
    assert response.status_code == 400
    assert ApiToken.objects.count() == 0
    response = client.post("/account/tokens/999/revoke/", follow=True)
    assert "No such token" in response.content.decode()


def test_one_cannot_revoke_another_users_token(users, client_for, make_token):
    make_token("alice", "read")
    token = ApiToken.objects.get(user=users["alice"])
    client_for("bob").post(f"/account/tokens/{token.pk}/revoke/")
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_api_docs_launch_a_run_with_the_session(users, server, browser_context):
    """Swagger UI from the vendored bundle (runs/api/docs.py) lists the operations, and
    its "Try it out" launches a run as the logged-in user: the page's script adds the
    session's CSRF token, without which the API refuses a session's POST (403)."""
    page = browser_context.new_page()
    log_in(page, server.url, "alice", "alice-pass-1")
    page.goto(f"{server.url}/api/v1/docs")
    launch = page.locator("#operations-runs-launch")
    launch.locator(".opblock-summary").click()
    launch.locator("button.try-out__btn").click()
    launch.locator("textarea.body-param__text").fill('{"agent": "ticker", "inputs": {}}')
    launch.locator("button.execute").click()
    status = launch.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip().startswith("202"), launch.locator(
        ".live-responses-table").inner_text()
    assert Run.objects.filter(owner=users["alice"], agent="ticker").count() == 1
