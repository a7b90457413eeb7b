"""My runs: only the user's own, newest first, filters, pagination, live hooks."""

import pytest
from django.urls import reverse

from runs import services
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
    return [run.pk for run in response.context["page"].object_list]


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
def test_it_paginates(alice_client, users):
    for i in range(27):
        services.run_launch(user=users["alice"], agent="ask", inputs={"question": f"q{i}"})
    first = alice_client.get("/")
    second = alice_client.get("/?page=2")
    assert len(row_ids(first)) == 25 and len(row_ids(second)) == 2
    assert not set(row_ids(first)) & set(row_ids(second))
    assert b"Older" in first.content and b"Page 1 of 2" in first.content


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
