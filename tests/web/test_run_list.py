"""My runs: only the user's own, newest first, filters, keyset pages, live hooks."""

import warnings

import pytest
from django.urls import reverse

from runs import selectors, services
from runs.models import Run


@pytest.fixture
def some_runs(users):
    def launch(owner, agent, **inputs):
        return services.run_launch(user=users[owner], agent=agent, inputs=inputs)

    runs = {
        "ticker": launch("alice", "ticker", steps=3),
        "ask": launch("alice", "ask"),
        "bobs": launch("bob", "ticker"),
    }
    services.run_cancel(run_id=runs["ask"].pk, user=users["alice"])
    return runs


def row_ids(response) -> list[str]:
    return [run.pk for run in response.context["page"].runs]


@pytest.mark.django_db
def test_it_lists_only_my_runs_newest_first(alice_client, some_runs):
    response = alice_client.get(reverse("runs:list"))
    assert response.status_code == 200
    assert row_ids(response) == [some_runs["ask"].pk, some_runs["ticker"].pk]
    assert some_runs["bobs"].pk[:8].encode() not in response.content
    body = response.content.decode()
    assert 'class="badge status-cancelled"' in body and 'class="badge status-queued"' in body
    assert 'data-ws-path="/ws/runs/"' in body


@pytest.mark.django_db
def test_it_filters_by_status_and_agent(alice_client, some_runs):
    assert row_ids(alice_client.get("/?status=cancelled")) == [some_runs["ask"].pk]
    assert row_ids(alice_client.get("/?status=active")) == [some_runs["ticker"].pk]
    assert row_ids(alice_client.get("/?agent=ticker")) == [some_runs["ticker"].pk]
    assert row_ids(alice_client.get("/?agent=ticker&status=cancelled")) == []
    assert len(row_ids(alice_client.get("/?status=bogus"))) == 2  # unknown: no filter


@pytest.mark.django_db
def test_htmx_gets_only_the_table(alice_client, some_runs):
    response = alice_client.get("/?status=cancelled", headers={"HX-Request": "true",
                                                               "HX-Target": "run-list"})
    body = response.content.decode()
    assert "<html" not in body and 'class="run-list"' in body
    assert some_runs["ask"].pk in body


@pytest.mark.django_db
def test_it_pages_by_cursor_older_and_back(alice_client, users):
    launched = [services.run_launch(user=users["alice"], agent="ask",
                                    inputs={"question": f"q{i}"}).pk for i in range(27)]
    first = alice_client.get("/")
    page = first.context["page"]
    second = alice_client.get(f"/?after={page.next_cursor}")
    assert len(row_ids(first)) == 25 and len(row_ids(second)) == 2
    assert row_ids(first) + row_ids(second) == launched[::-1]
    assert b"Older" in first.content and b"Newer" not in first.content
    assert b'data-page="1"' in first.content and b'data-page="older"' in second.content
    assert second.context["page"].next_cursor is None and b"Older" not in second.content
    back = alice_client.get(f"/?before={second.context['page'].prev_cursor}")
    assert row_ids(back) == row_ids(first)
    assert back.context["page"].prev_cursor is None


@pytest.mark.django_db
def test_a_cursor_keeps_the_filters(alice_client, users):
    for i in range(27):
        services.run_launch(user=users["alice"], agent="ask", inputs={"question": f"q{i}"})
    ticker = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 1})
    first = alice_client.get("/?agent=ask")
    assert ticker.pk not in row_ids(first)
    body = first.content.decode()
    assert f"agent=ask&amp;after={first.context['page'].next_cursor}" in body
    second = alice_client.get(f"/?agent=ask&after={first.context['page'].next_cursor}")
    assert len(row_ids(second)) == 2 and ticker.pk not in row_ids(second)


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", ["nonsense", "bm90fGEgY3Vyc29y", "MjAyNC0xM3wxMjM",
                                    "MjAyNC0wMS0wMVQwMDowMDowMHxhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYQ"])
def test_a_damaged_cursor_shows_the_newest_runs(alice_client, some_runs, cursor):
    """The last is a cursor's shape with a naive time: compared with the runs' times it
    would have warned (an error here, so a 500), not been ignored."""
    for key in ("after", "before"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            response = alice_client.get(f"/?{key}={cursor}")
        assert response.status_code == 200
        assert row_ids(response) == [some_runs["ask"].pk, some_runs["ticker"].pk]


@pytest.mark.django_db
def test_the_status_chips_count_up_to_a_cap(alice_client, some_runs, users, monkeypatch):
    for i in range(3):
        services.run_launch(user=users["alice"], agent="ask", inputs={"question": f"q{i}"})
    chips = {value: count for value, _, count in alice_client.get("/").context["chips"]}
    assert chips == {"": "5", "active": "4", "waiting": "0", "needs_attention": "0",
                     "succeeded": "0", "failed": "0", "cancelled": "1"}
    monkeypatch.setattr(selectors, "CHIP_COUNT_CAP", 3)
    chips = {value: count for value, _, count in alice_client.get("/").context["chips"]}
    assert chips[""] == "3+" and chips["active"] == "3+" and chips["cancelled"] == "1"


@pytest.mark.django_db
def test_the_agent_filter_offers_the_registered_agents(alice_client, some_runs):
    from runs.durable import registry

    agents = alice_client.get("/").context["agents"]
    assert agents == sorted(registry.names())
    assert "retired" in alice_client.get("/?agent=retired").context["agents"]


@pytest.mark.django_db
def test_an_empty_list_invites_a_launch(alice_client):
    response = alice_client.get("/")
    assert b"No runs yet" in response.content
    assert reverse("runs:launch").encode() in response.content


@pytest.mark.django_db
def test_rows_partial_returns_my_rows_out_of_band(alice_client, some_runs):
    response = alice_client.get(reverse("runs:rows") + f"?id={some_runs['ticker'].pk}"
                                f"&id={some_runs['bobs'].pk}")
    body = response.content.decode()
    assert f'id="run-row-{some_runs["ticker"].pk}"' in body and 'hx-swap-oob="true"' in body
    assert some_runs["bobs"].pk not in body


@pytest.mark.django_db
def test_progress_messages_are_escaped_in_the_list(alice_client, some_runs):
    Run.objects.filter(pk=some_runs["ticker"].pk).update(
        progress_message="<img src=x onerror=alert(1)>", progress_done=1, progress_total=3)
    body = alice_client.get("/").content.decode()
    assert "<img src=x" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body
