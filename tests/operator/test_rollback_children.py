"""The rollback page of a parent run (docs/children.md): the children its undone spawns
launched are listed, and the operator cancels them (the default) or keeps them."""

import pytest

from runs import services
from runs.models import AuditEntry, Checkpoint, Run
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db


def waiting_parent(user) -> Run:
    parent = services.run_launch(user=user, agent="fan_out", inputs={
        "children": 2, "cap": 5, "steps": 1, "delay": 0, "child": "ticker"})
    return drive(parent.pk)


@pytest.mark.parametrize("choice, status", [(None, "cancelled"), ("cancel", "cancelled"),
                                            ("keep", "queued")])
def test_the_operator_cancels_or_keeps_the_children(ops, users, choice, status):
    parent = waiting_parent(users["alice"])
    children = list(Run.objects.filter(parent=parent).order_by("created_at"))
    start = Checkpoint.objects.get(run_id=parent.pk, reason="start").number
    page = ops.get(f"/ops/runs/{parent.pk}/rollback/?checkpoint={start}").content.decode()
    assert 'id="undone-children"' in page and 'id="rollback-children"' in page
    assert [row[:32] for row in page.split('<tr data-child="')[1:]] == [c.pk for c in children]
    form = {"checkpoint": start, "reason": "redo the fan-out", "then": "pause"}
    if choice:
        form["children"] = choice
    assert ops.post(f"/ops/runs/{parent.pk}/rollback/", form).status_code == 302
    assert {c.status for c in Run.objects.filter(parent=parent)} == {status}
    audit = AuditEntry.objects.get(run_id=parent.pk, action="rollback")
    assert audit.after["children"] == (choice or "cancel")


def test_a_rollback_that_undoes_no_spawn_asks_nothing(ops, users):
    parent = waiting_parent(users["alice"])
    last = Checkpoint.objects.filter(run_id=parent.pk).order_by("-number").first().number
    page = ops.get(f"/ops/runs/{parent.pk}/rollback/?checkpoint={last}").content.decode()
    assert 'id="rollback-children"' not in page and 'id="undone-children"' not in page


def test_a_childs_operator_page_links_its_parent(ops, users):
    parent = waiting_parent(users["alice"])
    child = Run.objects.filter(parent=parent).first()
    page = ops.get(f"/ops/runs/{child.pk}/").content.decode()
    assert f'href="/ops/runs/{parent.pk}/"' in page.split('id="ops-run-parent"')[1]
