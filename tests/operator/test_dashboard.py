"""The all-runs page: filters, search, sort, keyset pages and a constant query count.
(The 100,000-run dataset is in bench/ops_dashboard.py; a smaller one here.)"""

import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import Checkpoint, Run
from runs.operator import selectors

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def make_runs(n, *, owner=None, agent="ticker", status="succeeded", start=0, same_time=False,
              **fields):
    runs = []
    updated_at = fields.pop("updated_at", None)  # for every run made (popped once, not per run)
    for i in range(start, start + n):
        created = NOW - timedelta(seconds=0 if same_time else i)
        runs.append(Run(id=uuid.uuid4().hex, agent=agent, agent_version="1", owner=owner,
                        status=status, created_at=created, updated_at=updated_at or created,
                        **fields))
    Run.objects.bulk_create(runs, batch_size=1000)
    return runs


def run_ids(response):
    return re.findall(r'<tr data-run="([0-9a-f]{32})"', response.content.decode())


def next_link(response, rel="next"):
    match = re.search(rf'<a rel="{rel}" href="([^"]+)"', response.content.decode())
    if not match:
        return None
    link = match.group(1).replace("&amp;", "&")
    return "/ops/" + link if link.startswith("?") else link


def walk(ops, url, rel="next"):
    pages = []
    while url:
        response = ops.get(url)
        assert response.status_code == 200
        pages.append(run_ids(response))
        url = next_link(response, rel)
    return pages


@pytest.mark.parametrize("same_time", [False, True])
def test_pages_cover_every_run_once_in_order_both_ways(ops, users, same_time):
    runs = make_runs(120, owner=users["alice"], same_time=same_time)
    expected = [r.id for r in sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)]
    pages = walk(ops, "/ops/")
    assert [len(p) for p in pages] == [50, 50, 20]
    assert [i for p in pages for i in p] == expected
    # and back from the last page with the "previous" links
    last = ops.get(next_link(ops.get(next_link(ops.get("/ops/")))))
    backwards = walk(ops, next_link(last, "prev"), rel="prev")
    assert backwards == [pages[1], pages[0]]


def test_oldest_first(ops, users):
    runs = make_runs(60, owner=users["alice"])
    oldest = walk(ops, "/ops/?sort=created")
    assert [i for p in oldest for i in p] == [r.id for r in sorted(runs, key=lambda r: (r.created_at, r.id))]


def test_filters(ops, users):
    alice, bob = users["alice"], users["bob"]
    done = make_runs(5, owner=alice)
    # Healthy holders by the real clock (the stall rule's): NOW is the module's import time,
    # minutes ago by the time this runs in the whole suite.
    held = {"updated_at": timezone.now(), "lease_expires_at": timezone.now() + timedelta(minutes=10)}
    running = make_runs(3, owner=bob, status="running", start=10, lease_owner="hostA:101:aa",
                        **held)
    other_host = make_runs(1, owner=bob, status="running", start=20, lease_owner="hostB:7:bb",
                           **held)
    attention = make_runs(2, owner=alice, status="needs_attention", agent="steps", start=30,
                          attention={"kind": "crash_loop", "message": "boom"})
    stalled = make_runs(1, owner=bob, status="running", start=40,
                        updated_at=NOW - timedelta(minutes=30))
    # The stall rule's other cases, which no "quiet for N minutes" filter finds right: a
    # holder gone two minutes ago, a timer due long ago that nobody claims, and a claim
    # not yet written, quiet for half an hour but with a valid lease (not stalled).
    lost = make_runs(1, status="running", start=50, lease_owner="hostC:1:cc",
                     lease_expires_at=NOW - timedelta(minutes=2),
                     updated_at=NOW - timedelta(minutes=3))
    due = make_runs(1, status="waiting", start=60, wake_at=NOW - timedelta(minutes=30),
                    updated_at=NOW - timedelta(minutes=40))
    make_runs(1, status="queued", start=70, lease_owner="hostC:2:dd",
              lease_expires_at=timezone.now() + timedelta(minutes=10),
              updated_at=timezone.now() - timedelta(minutes=30))
    ids = lambda url: set(run_ids(ops.get(url)))
    assert ids("/ops/?status=succeeded") == {r.id for r in done}
    assert ids("/ops/?attention=on") == {r.id for r in attention}
    assert ids("/ops/?agent=steps") == {r.id for r in attention}
    assert ids("/ops/?owner=alice") == {r.id for r in done + attention}
    assert ids("/ops/?worker=hostA") == {r.id for r in running}
    assert ids("/ops/?worker=hostB:7") == {r.id for r in other_host}
    assert ids("/ops/?stalled=any") == {r.id for r in stalled + lost + due}
    assert ids("/ops/?stalled=lease_lost") == {r.id for r in lost}
    assert ids("/ops/?stalled=unclaimed") == {r.id for r in stalled + due}
    assert ids("/ops/?stalled=silent") == set()
    assert ids(f"/ops/?q={done[0].id[:10]}") == {done[0].id}
    assert ids(f"/ops/?q={done[0].id.upper()}") == {done[0].id}
    assert ids("/ops/?q=bo") == {r.id for r in running + other_host + stalled}
    assert ids("/ops/?status=running&owner=bob&worker=hostA") == {r.id for r in running}
    assert ids("/ops/?q=nobody-at-all") == set()


def test_bad_filters_and_cursors_are_harmless(ops, users):
    make_runs(3, owner=users["alice"])
    assert len(run_ids(ops.get("/ops/?stalled=abc&sort=nonsense&after=%%%garbage"))) == 3
    assert len(run_ids(ops.get("/ops/?stalled=10"))) == 3  # the old minutes: not a kind
    response = ops.get("/ops/?status=exploded")
    assert response.status_code == 200 and len(run_ids(response)) == 3


def test_stored_bytes_per_run_and_in_total(ops, users):
    run = make_runs(1, owner=users["alice"])[0]
    for number in (1, 2):
        Checkpoint.objects.create(run=run, number=number, branch=1, step_no=number, codec="json",
                                  blob=b"x" * 1500, size=1500)
    assert "2.9\xa0KB" in ops.get("/ops/").content.decode()
    assert "2.9\xa0KB" in ops.get("/ops/storage/").content.decode()


def test_the_live_refresh_returns_only_the_table(ops, users):
    make_runs(2, owner=users["alice"])
    response = ops.get("/ops/?status=succeeded", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="runs-table")
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="runs-table"') and "<html" not in body
    assert len(run_ids(response)) == 2


def count_queries(ops, url):
    with CaptureQueriesContext(connection) as queries:
        assert ops.get(url).status_code == 200
    return len(queries)


def test_queries_per_page_do_not_grow_with_runs(ops, users):
    make_runs(3, owner=users["alice"])
    small = {url: count_queries(ops, url) for url in ("/ops/", "/ops/?owner=alice&sort=created")}
    runs = make_runs(3000, owner=users["bob"], start=10)
    for run in runs[:200]:
        Checkpoint.objects.create(run=run, number=1, branch=1, step_no=1, codec="json", blob=b"{}",
                                  size=2)
    url = "/ops/"
    for _ in range(20):
        url = next_link(ops.get(url))
    for name, before in small.items():
        assert count_queries(ops, name) == before
    assert count_queries(ops, url) == small["/ops/"]
    assert small["/ops/"] <= 8, small


def test_5000_runs_still_paginate_quickly(ops, users, django_assert_max_num_queries):
    make_runs(5000, owner=users["alice"])
    url = "/ops/?sort=created"
    seen = 0
    for _ in range(30):
        with django_assert_max_num_queries(8):
            response = ops.get(url)
        seen += len(run_ids(response))
        url = next_link(response)
    assert seen == 1500  # server time per page is measured by bench/ops_dashboard.py


def test_selector_keyset_page_directly(users):
    make_runs(7, owner=users["alice"])
    first = selectors.keyset_page(Run.objects.all(), size=3)
    second = selectors.keyset_page(Run.objects.all(), size=3, after=first.next_cursor)
    third = selectors.keyset_page(Run.objects.all(), size=3, after=second.next_cursor)
    assert [len(p.runs) for p in (first, second, third)] == [3, 3, 1]
    assert first.prev_cursor is None and third.next_cursor is None
    back = selectors.keyset_page(Run.objects.all(), size=3, before=third.prev_cursor)
    assert [r.pk for r in back.runs] == [r.pk for r in second.runs]
