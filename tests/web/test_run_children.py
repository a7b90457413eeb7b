"""The run page's tree of child runs (docs/children.md): a parent lists its children with
their status, links and costs, and the totals with theirs; a child links its parent."""

import pytest
from django.urls import reverse

from runs.models import Run
from tests.web.conftest import drive


@pytest.fixture
def family(launch_and_drive):
    parent = launch_and_drive("fan_out", {"children": 3, "cap": 5, "steps": 1, "delay": 0,
                                          "child": "ticker"})
    assert parent.status == "waiting" and parent.attention["kind"] == "children"
    children = list(Run.objects.filter(parent=parent).order_by("created_at"))
    drive(children[0].pk)  # the first ends; the others are still queued
    Run.objects.filter(pk=children[1].pk).update(usage={"cost": 0.25, "prompt_tokens": 100,
                                                        "completion_tokens": 20, "calls": 1})
    Run.objects.filter(pk=parent.pk).update(usage={"cost": 0.5, "prompt_tokens": 10,
                                                   "completion_tokens": 5, "calls": 1})
    return parent, children


@pytest.mark.django_db
def test_a_parent_shows_its_children_and_their_costs(alice_client, family):
    parent, children = family
    body = alice_client.get(parent.get_absolute_url()).content.decode()
    assert 'id="panel-children"' in body and 'id="run-children"' in body
    rows = body.split('data-child="')[1:]
    assert [row[:32] for row in rows] == [c.pk for c in children]  # in spawn order
    assert reverse("runs:detail", args=[children[0].pk]) in rows[0]
    assert "status-succeeded" in rows[0] and "status-queued" in rows[1]
    assert "$0.2500" in rows[1]
    total = body.split('id="family-total" class="mono">')[1].split("<")[0]
    assert total == "$0.7500"  # its own $0.50 and its children's $0.25


@pytest.mark.django_db
def test_a_child_links_its_parent_and_the_panel_comes_live(alice_client, family):
    parent, children = family
    body = alice_client.get(children[0].get_absolute_url()).content.decode()
    parent_link = body.split('id="run-parent"')[1].split("</span>")[0]
    assert reverse("runs:detail", args=[parent.pk]) in parent_link
    panel = alice_client.get(reverse("runs:panels", args=[parent.pk]) + "?p=children")
    html = panel.content.decode()
    assert 'id="panel-children"' in html and 'hx-swap-oob="true"' in html
    assert html.count('data-child="') == 3


@pytest.mark.django_db
def test_a_run_without_family_shows_no_tree(alice_client, launch_and_drive):
    run = launch_and_drive("ticker", {"steps": 1, "delay": 0})
    body = alice_client.get(run.get_absolute_url()).content.decode()
    assert '<section id="panel-children" class="card children-card" hidden>' in body
    assert 'id="run-children"' not in body


@pytest.mark.django_db
def test_the_wait_and_the_spawns_read_as_sentences(alice_client, family):
    parent, children = family
    body = alice_client.get(parent.get_absolute_url()).content.decode()
    assert 'id="waiting-children"' in body
    assert f"spawned a child run of ticker: {children[0].pk[:8]}" in body
    assert "waiting for its children: 3 running" in body
