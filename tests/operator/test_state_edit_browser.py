"""Editing one value of a 2 MB state in a real browser against Daphne: the operator
walks down to the value by its path, sees the diff before confirming, and only the
edit crosses the wire; the new branch holds exactly that change, and the run stays
paused. A post too large for the server comes back as the styled form with an error."""

import copy

import pytest

from runs.models import AuditEntry, Run
from tests.support.big_state import latest_state, paused_run_with_big_state
from tests.web.conftest import screenshot

pytestmark = [pytest.mark.services, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_editing_one_value_of_a_2mb_state_with_the_diff_shown_first(operator_page, server, users):
    page = operator_page
    run = paused_run_with_big_state(users["alice"])
    checkpoint, before = latest_state(run)
    posted = []
    page.on("request", lambda request: posted.append(len(request.post_data_buffer or b""))
            if request.method == "POST" else None)

    page.goto(f"{server.url}/ops/runs/{run.pk}/")
    page.click("#edit-state-link")
    page.wait_for_selector("#state-children")
    assert "MB" in page.inner_text('#state-children tr[data-path="/pages"]')
    page.click('#state-children tr[data-path="/pages"] a')
    page.wait_for_selector('#state-children tr[data-path="/pages/41"]')
    page.click('#state-children tr[data-path="/pages/41"] a')
    page.wait_for_selector('#state-children tr[data-path="/pages/41/title"]')
    assert page.input_value("#id_path") == "/pages/41"
    assert '"title": "Page 41"' in page.input_value("#id_value")

    page.fill("#id_path", "/pages/41/title")
    page.fill("#id_value", '"Page forty-one (checked by hand)"')
    page.fill('#edit-state-form input[name="reason"]', "title was wrong")
    page.click("#edit-preview-button")
    page.wait_for_selector("#edit-preview")
    diff = page.inner_text("#edit-preview pre.diff")
    assert '-  "title": "Page 41",' in diff and '+  "title": "Page forty-one (checked by hand)",' in diff
    assert latest_state(Run.objects.get(pk=run.pk))[0] == checkpoint  # nothing yet
    confirm = page.locator("#edit-confirm")
    assert confirm.is_visible() and page.input_value("#id_json_patch") == ""
    screenshot(page, "ops-edit-state")

    confirm.click()
    page.wait_for_url(f"{server.url}/ops/runs/{run.pk}/")
    after_run = Run.objects.get(pk=run.pk)
    assert (after_run.status, after_run.branch) == ("paused", run.branch + 1)
    expected = copy.deepcopy(before)
    expected["pages"][41]["title"] = "Page forty-one (checked by hand)"
    assert latest_state(after_run)[1] == expected
    assert AuditEntry.objects.get(run=run, reason="title was wrong").after["paths"] == [
        "/pages/41/title"]
    assert posted and max(posted) < 10_000  # the edit, never the 2 MB document


def test_a_post_too_large_for_the_server_shows_the_styled_form(operator_page, server, users):
    page = operator_page
    run = paused_run_with_big_state(users["alice"])
    page.goto(f"{server.url}/ops/runs/{run.pk}/state/?path=/pages")
    page.wait_for_selector("#edit-state-form")
    page.evaluate("""() => { document.querySelector('#id_path').value = '/pages';
        document.querySelector('#id_value').value = JSON.stringify(
            Array(30000).fill('x'.repeat(100))); }""")
    page.fill('#edit-state-form input[name="reason"]', "replace them all")
    page.click("#edit-preview-button")
    page.wait_for_selector("#edit-error")
    assert "The edit was too large to send" in page.inner_text("#edit-error")
    assert page.locator("#edit-state-form").is_visible()
    # the app's stylesheet applies (its background), not a bare browser-default page
    assert page.evaluate("getComputedStyle(document.documentElement).backgroundColor") == "rgb(246, 247, 251)"
    assert Run.objects.get(pk=run.pk).branch == run.branch
