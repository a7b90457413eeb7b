"""A stalled run shows as `stalled`, with why and since when, everywhere a run's state
shows: the run page, the run list and its rows, the operator dashboard, the operator's
run page, the attention queue, `runs show` and `runs list`; and the live sockets say
when a run stalls and when it moves again."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from runs import services
from runs.models import Run
from runs.operator.groups import ensure_operators_group
from tests.web import test_consumers as live

receive = live.receive
sockets, cookies = live.sockets, live.cookies  # the live-socket fixtures

OWNER = "web-1:4242:ab12cd34"


def lose_lease(run_id: str, seconds_ago: float = 30) -> None:
    """What a frozen or dead holder leaves: a running run whose lease ran out long ago."""
    now = timezone.now()
    Run.objects.filter(pk=run_id).update(
        status="running", lease_owner=OWNER, lease_expires_at=now - timedelta(seconds=seconds_ago),
        updated_at=now - timedelta(seconds=seconds_ago + 4))


def hold(run_id: str) -> None:
    """A live holder: a fresh lease, a recent event."""
    now = timezone.now()
    Run.objects.filter(pk=run_id).update(status="running", lease_owner=OWNER,
                                         lease_expires_at=now + timedelta(seconds=30),
                                         updated_at=now)


@pytest.fixture
def ticker(users):
    return services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 5})


def html(response) -> str:
    assert response.status_code == 200
    return response.content.decode()


# --- the user's pages ------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_run_page_shows_a_stall_and_drops_the_stripe(alice_client, ticker):
    hold(ticker.pk)
    body = html(alice_client.get(reverse("runs:detail", args=[ticker.pk])))
    assert 'class="badge status-running"' in body and "is-running" in body
    assert re.search(r'<p id="run-stall"[^>]* hidden', body)

    lose_lease(ticker.pk)
    body = html(alice_client.get(reverse("runs:detail", args=[ticker.pk])))
    assert 'class="badge status-stalled"' in body and "status-running" not in body
    assert "is-running" not in body  # no moving stripe
    assert 'data-stalled="lease_lost"' in body
    assert re.search(r'<p id="run-stall"[^>]*>(?!.*hidden)', body)
    assert "lease holder web-1:4242 gone:" in body
    since = Run.objects.get(pk=ticker.pk).lease_expires_at
    assert f'<time id="run-stall-since" datetime="{since.isoformat()}">' in body


@pytest.mark.django_db
def test_the_run_list_and_its_live_rows_show_a_stall(alice_client, ticker, users):
    other = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 5})
    hold(other.pk)
    lose_lease(ticker.pk)
    body = html(alice_client.get(reverse("runs:list")))
    row = re.search(rf'<tr id="run-row-{ticker.pk}".*?</tr>', body, re.S).group(0)
    assert 'data-stalled="lease_lost"' in row and 'badge status-stalled' in row
    assert "is-running" not in row and "lease holder web-1:4242 gone:" in row
    assert re.search(r'stalled since <time datetime="[^"]+">\d\d:\d\d:\d\d</time>: lease', row)
    moving = re.search(rf'<tr id="run-row-{other.pk}".*?</tr>', body, re.S).group(0)
    assert "is-running" in moving and "data-stalled" not in moving
    rows = html(alice_client.get(reverse("runs:rows") + f"?id={ticker.pk}"))
    assert 'badge status-stalled' in rows


@pytest.mark.django_db
def test_the_live_row_summary_carries_the_stall(users, ticker):
    from runs import selectors

    lose_lease(ticker.pk)
    [summary] = selectors.run_summaries(users["alice"], [ticker.pk])
    assert summary["status"] == "running"
    assert summary["stall"]["kind"] == "lease_lost"
    assert summary["stall"]["why"].startswith("lease holder web-1:4242 gone:")


# --- the operator's pages ----------------------------------------------------------------------
@pytest.fixture
def operator_client(client_for, users):
    ensure_operators_group()
    return client_for("charlie")


def make_stalled(n: int) -> list[str]:
    now = timezone.now()
    runs = [Run(id=uuid.uuid4().hex, agent="ticker", agent_version="1", status="running",
                lease_owner=OWNER, lease_expires_at=now - timedelta(seconds=60 + i),
                updated_at=now - timedelta(seconds=70 + i), created_at=now) for i in range(n)]
    Run.objects.bulk_create(runs)
    return [run.pk for run in runs]


@pytest.mark.django_db
def test_the_dashboard_shows_stalled_runs_with_why_and_since(operator_client, ticker):
    hold(ticker.pk)
    [stalled] = make_stalled(1)
    body = html(operator_client.get(reverse("operator:dashboard")))
    row = re.search(rf'<tr data-run="{stalled}"[^>]*>.*?</tr>', body, re.S).group(0)
    assert 'data-status="stalled"' in row and "lease holder web-1:4242 gone:" in row
    assert "<time datetime=" in row
    moving = re.search(rf'<tr data-run="{ticker.pk}"[^>]*>.*?</tr>', body, re.S).group(0)
    assert 'data-status="running"' in moving and "stalled" not in moving


@pytest.mark.django_db
def test_the_attention_queue_lists_stalled_runs_in_bounded_queries(operator_client, ticker):
    hold(ticker.pk)
    [first] = make_stalled(1)
    with CaptureQueriesContext(connection) as one:
        body = html(operator_client.get(reverse("operator:attention")))
    assert f'data-run="{first}"' in body and f'data-run="{ticker.pk}"' not in body
    assert "lease holder web-1:4242 gone:" in body
    make_stalled(20)
    with CaptureQueriesContext(connection) as many:
        body = html(operator_client.get(reverse("operator:attention")))
    assert body.count('data-status="stalled"') == 21
    assert len(many) == len(one)  # no query per run


@pytest.mark.django_db
def test_the_attention_count_includes_stalled_runs(ticker):
    from runs.operator import selectors

    hold(ticker.pk)
    assert selectors.attention_count() == 0
    make_stalled(2)
    assert selectors.attention_count() == 2


@pytest.mark.django_db
def test_the_operator_run_page_shows_the_stall_and_its_poll_notices_it(operator_client, ticker):
    hold(ticker.pk)
    page = html(operator_client.get(reverse("operator:run", args=[ticker.pk])))
    assert 'data-status="running"' in page
    token = re.search(r'token=([^"&]+)', page).group(1)
    after = re.search(r'after=(\d+)', page).group(1)
    live = reverse("operator:run_live", args=[ticker.pk]) + f"?after={after}&token={token}"
    assert operator_client.get(live).status_code == 204  # nothing changed
    lose_lease(ticker.pk)
    body = html(operator_client.get(live))  # no event, but the stall changes the token
    assert 'data-status="stalled"' in body and "lease holder web-1:4242 gone:" in body


# --- the command line --------------------------------------------------------------------------
def runs_command(*args) -> str:
    out = StringIO()
    call_command("runs", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_runs_show_says_the_lease_holder_is_gone(ticker):
    hold(ticker.pk)
    assert "STALLED" not in runs_command("show", ticker.pk)
    assert json.loads(runs_command("show", ticker.pk, "--json"))["stall"] is None
    lose_lease(ticker.pk)
    text = runs_command("show", ticker.pk)
    assert re.search(r"STALLED since \S+: lease holder web-1:4242 gone: "
                     "its lease ran out and no worker took the run over", text)
    assert f"lease: {OWNER} until" in text
    data = json.loads(runs_command("show", ticker.pk, "--json"))
    assert data["status"] == "running" and data["stall"]["kind"] == "lease_lost"
    assert "running STALLED" in runs_command("list")


# --- the live sockets ----------------------------------------------------------------------------
async def held_run(users) -> Run:
    run = await sync_to_async(services.run_launch)(user=users["alice"], agent="ticker",
                                                   inputs={"steps": 5})
    await sync_to_async(hold)(run.pk)
    return run


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_run_socket_says_when_a_run_stalls_and_when_it_moves(sockets, cookies, users):
    run = await held_run(users)
    communicator, connected, _ = await sockets(f"/ws/runs/{run.pk}/", cookies["alice"])
    assert connected
    await communicator.send_json_to({"type": "hello", "after": 0, "stalled": None})
    assert (await receive(communicator))["type"] == "welcome"
    assert (await receive(communicator))["type"] == "events"
    await live.assert_quiet(communicator, run.pk)  # moving: no stall message

    await sync_to_async(lose_lease)(run.pk)
    message = await receive(communicator, timeout=3)
    assert message["type"] == "stall" and message["stall"]["kind"] == "lease_lost"
    assert message["stall"]["why"].startswith("lease holder web-1:4242 gone:")
    # said once, not at every poll: a marker only a poll can bring (it reads the stall too)
    await live.assert_quiet(communicator, run.pk, announce=False)

    await sync_to_async(hold)(run.pk)
    assert await receive(communicator, timeout=3) == {"type": "stall", "stall": None}


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_page_that_shows_a_stall_hears_that_it_ended(sockets, cookies, users):
    run = await held_run(users)  # it moved again between the page load and the socket
    communicator, _, _ = await sockets(f"/ws/runs/{run.pk}/", cookies["alice"])
    await communicator.send_json_to({"type": "hello", "after": 0, "stalled": "lease_lost"})
    messages = [await receive(communicator) for _ in range(3)]
    assert [m["type"] for m in messages] == ["welcome", "events", "stall"]
    assert messages[2]["stall"] is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_list_socket_says_which_rows_stalled(sockets, cookies, users):
    run = await held_run(users)
    communicator, _, _ = await sockets("/ws/runs/", cookies["alice"])
    await communicator.send_json_to({"type": "watch", "runs": {run.pk: 1}, "newest": run.pk})
    assert (await receive(communicator))["type"] == "watching"
    await sync_to_async(lose_lease)(run.pk)
    message = await receive(communicator, timeout=3)
    assert message["type"] == "stalls" and message["runs"][run.pk]["kind"] == "lease_lost"
    await communicator.send_json_to({"type": "watch", "runs": {run.pk: 1}, "stalled": [1]})
    error = await receive(communicator)
    assert error["type"] == "error" and error["code"] == "bad_field"


@pytest.mark.django_db
def test_a_retry_due_long_ago_that_nobody_claims_is_stalled_on_the_pages(alice_client,
                                                                        operator_client, ticker):
    due = timezone.now() - timedelta(seconds=300)
    Run.objects.filter(pk=ticker.pk).update(
        status="waiting", lease_owner=None, lease_expires_at=None, wake_at=due,
        updated_at=due - timedelta(seconds=30),
        attention={"kind": "retry", "tool": "t.fetch_page", "attempt": 6, "error": "HTTP 503",
                   "error_type": "TransientHTTPError", "wake_at": due.timestamp(),
                   "step_no": 1, "seq": 0})
    body = html(alice_client.get(reverse("runs:detail", args=[ticker.pk])))
    assert 'data-stalled="unclaimed"' in body and "timer due 5 min ago" in body
    assert "retrying fetch_page in 0 s, attempt 6" in re.sub(r"<[^>]+>", "", body)
    assert f'data-run="{ticker.pk}"' in html(operator_client.get(reverse("operator:attention")))
