"""The operator pages' small things: the pager's links all lead somewhere, the audit
trail says what a pause of a running run changed, the actions that cannot be taken back
are set apart and ask first, and every button is one of the user pages' buttons."""

import re

import pytest

from runs import services
from runs.models import Run
from tests.operator.conftest import launch
from tests.operator.test_dashboard import make_runs, next_link
from tests.web.test_stalls_shown import hold

pytestmark = pytest.mark.django_db


def hrefs(body: str) -> list[str]:
    return re.findall(r'<a\b[^>]*\bhref="([^"]*)"', body)


def test_no_link_of_the_dashboard_has_an_empty_href(ops, users):
    make_runs(120)
    first = ops.get("/ops/")
    assert "" not in hrefs(first.content.decode())
    assert "first page" not in first.content.decode()  # it is the first page
    second = ops.get(next_link(first))
    body = second.content.decode()
    assert "" not in hrefs(body)
    link = re.search(r'<a href="([^"]+)">first page</a>', body).group(1).replace("&amp;", "&")
    assert ops.get(link).content.decode().count("<tr data-run=") == 50
    assert re.findall(r'<tr data-run="(\w+)"', ops.get(link).content.decode()) == \
        re.findall(r'<tr data-run="(\w+)"', first.content.decode())


def audit_lines(ops, run) -> list[str]:
    body = ops.get(f"/ops/runs/{run.pk}/").content.decode()
    audit = body[body.index('<ol id="audit"'):]
    audit = audit[:audit.index("</ol>")]
    return [re.sub(r"\s+", " ", m).strip()
            for m in re.findall(r'<span class="muted mono">(.*?)</span>', audit, re.S)]


def test_the_audit_line_of_a_pause_of_a_running_run_says_what_changed(ops, users):
    run = launch(users["alice"], steps=3)
    hold(run.pk)  # running, held by a worker: a pause only asks it to stop
    services.run_pause(run_id=run.pk, user=users["charlie"], reason="deploy")
    services.run_resume(run_id=run.pk, user=users["charlie"], reason="no need")
    lines = audit_lines(ops, run)
    assert "running, pause requested" in lines and "running, pause withdrawn" in lines
    assert not any("running → running" in line for line in lines)
    Run.objects.filter(pk=run.pk).update(lease_owner=None, lease_expires_at=None, status="queued")
    services.run_pause(run_id=run.pk, user=users["charlie"], reason="now")
    assert "queued → paused" in audit_lines(ops, run)


def control_buttons(body: str) -> list[tuple[str, str, str]]:
    form = body[body.index('id="action-form"'):]
    form = form[:form.index("</form>")]
    return re.findall(r'<button class="([^"]*)" type="submit" name="action" value="(\w+)"'
                      r'(?: data-confirm="([^"]*)")?', form)


def test_cancel_is_set_apart_after_pause_in_red_and_confirmed(ops, users):
    run = launch(users["alice"], steps=3)
    body = ops.get(f"/ops/runs/{run.pk}/").content.decode()
    buttons = control_buttons(body)
    assert [value for _, value, _ in buttons][-1] == "cancel"
    assert ("button", "pause", "") in buttons
    cls, _, confirm = buttons[-1]
    assert cls == "button danger" and confirm.startswith("Cancel this run?")
    zone = body[body.index('class="danger-zone"'):]
    assert zone.index('value="cancel"') < zone.index("</span>")
    assert 'value="pause"' not in zone[:zone.index("</span>")]
    assert "js/confirm.js" in body


def test_operator_pages_use_the_shared_stylesheet_only(ops, users):
    """No page-local styles: inside .ops every button gets the user pages' look."""
    run = launch(users["alice"], steps=3)
    for page in ("/ops/", "/ops/attention/", "/ops/workers/", f"/ops/runs/{run.pk}/"):
        body = ops.get(page).content.decode()
        assert "<style" not in body and '<div class="ops">' in body, page


def test_filter_checkboxes_sit_beside_their_labels(ops, users):
    body = ops.get("/ops/").content.decode()
    filters = body[body.index('id="run-filters"'):]
    filters = filters[:filters.index("</form>")]
    assert re.search(r'<label class="check"><input type="checkbox" name="attention"[^>]*> '
                     r'needs attention</label>', filters)
    assert '<button class="button primary" type="submit">Filter</button>' in filters
