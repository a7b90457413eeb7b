"""The run page and its partials: what it shows, whom it shows it to, and escaping."""

import json
import re

import pytest
from django.urls import reverse

from runs.models import Checkpoint, RunEvent

PRIVATE_URLS = ("runs:detail", "runs:panels", "runs:events", "runs:output_json")


@pytest.fixture
def ticker_run(launch_and_drive):
    return launch_and_drive("ticker", {"steps": 3, "delay": 0})


@pytest.mark.django_db
def test_it_shows_the_run_at_its_last_event(alice_client, ticker_run):
    response = alice_client.get(ticker_run.get_absolute_url())
    assert response.status_code == 200
    body = response.content.decode()
    seqs = [e["seq"] for e in response.context["events"]]
    assert seqs == list(RunEvent.objects.filter(run=ticker_run).order_by("seq")
                        .values_list("seq", flat=True))
    assert f'data-last-seq="{ticker_run.event_seq}"' in body
    assert f'data-ws-path="/ws/runs/{ticker_run.pk}/"' in body
    assert 'class="badge status-succeeded"' in body
    assert "tick 3" in body
    assert 'aria-valuenow="100"' in body


@pytest.mark.django_db
def test_it_shows_effects_timeline_and_output(alice_client, ticker_run):
    body = alice_client.get(ticker_run.get_absolute_url()).content.decode()
    assert body.count('class="effect effect-done') == 3 and "pause_for" in body
    for number in Checkpoint.objects.filter(run=ticker_run).values_list("number", flat=True):
        assert f'data-checkpoint="{number}"' in body
    assert "<svg" in body and 'class="mark reason-start"' in body
    assert 'id="panel-output"' in body and "ticks" in body
    assert reverse("runs:output_json", args=[ticker_run.pk]) in body


@pytest.mark.django_db
def test_another_users_run_is_a_404_everywhere(client_for, ticker_run):
    bob = client_for("bob")
    for name in PRIVATE_URLS:
        assert bob.get(reverse(name, args=[ticker_run.pk])).status_code == 404, name
    assert bob.get(reverse("runs:checkpoint", args=[ticker_run.pk, 1])).status_code == 404
    for name in ("runs:cancel", "runs:input"):
        assert bob.post(reverse(name, args=[ticker_run.pk])).status_code == 404, name
    missing = bob.get(reverse("runs:detail", args=["no-such-run"]))
    assert missing.status_code == 404
    # the same page as for a run that does not exist: nothing tells them apart
    def page(response):
        return re.sub(rb'(X-CSRFToken": "|name="csrfmiddlewaretoken" value=")[^"]+', b"",
                      response.content)
    assert page(bob.get(reverse("runs:detail", args=[ticker_run.pk]))) == page(missing)


@pytest.mark.django_db
def test_an_operator_may_look_at_any_run(client_for, users, ticker_run):
    from django.contrib.auth.models import Permission

    perm = Permission.objects.get(codename="operate_run", content_type__app_label="runs")
    users["charlie"].groups.get(name="Operators").permissions.add(perm)
    charlie = client_for("charlie")
    response = charlie.get(ticker_run.get_absolute_url())
    assert response.status_code == 200
    assert b'href="/ops/"' in response.content  # the Operations link


@pytest.mark.django_db
def test_plain_users_have_no_operations_link(alice_client):
    assert b'href="/ops/"' not in alice_client.get("/").content


@pytest.mark.django_db
def test_agent_text_is_escaped_everywhere(alice_client, launch_and_drive):
    run = launch_and_drive("shout", {"text": "<img src=x onerror=alert(3)>"})
    assert run.status == "succeeded"
    pages = [alice_client.get(run.get_absolute_url()),
             alice_client.get(reverse("runs:panels", args=[run.pk])),
             alice_client.get(reverse("runs:events", args=[run.pk]) + "?before=99"),
             alice_client.get(reverse("runs:checkpoint", args=[run.pk, 1]))]
    for response in pages:
        body = response.content.decode()
        assert response.status_code == 200
        assert "<script>window.__pwned" not in body, response.request["PATH_INFO"]
        assert "<img src=x" not in body and "<b>bold</b>" not in body
    page = pages[0].content.decode()
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in page  # log
    assert "&lt;script&gt;window.__pwned = 2&lt;/script&gt;" in page  # output
    assert "&lt;img src=x onerror=alert(3)&gt;" in page


@pytest.mark.django_db
def test_the_output_downloads_as_json(alice_client, launch_and_drive):
    run = launch_and_drive("shout", {"text": "hi"})
    response = alice_client.get(reverse("runs:output_json", args=[run.pk]))
    assert response["Content-Type"].startswith("application/json")
    assert response["Content-Disposition"].startswith("attachment;")
    assert json.loads(response.content) == run.output


@pytest.mark.django_db
def test_no_output_before_the_end(alice_client, launch_and_drive):
    run = launch_and_drive("ask")
    assert run.status == "waiting"
    assert alice_client.get(reverse("runs:output_json", args=[run.pk])).status_code == 404


@pytest.mark.django_db
def test_a_checkpoints_state_is_shown_and_downloadable(alice_client, ticker_run):
    url = reverse("runs:checkpoint", args=[ticker_run.pk, 2])
    body = alice_client.get(url).content.decode()
    assert "Checkpoint #2" in body and "&quot;i&quot;: 1" in body
    download = alice_client.get(url + "?download=1")
    assert json.loads(download.content) == {"i": 1, "n": 3, "delay": 0}
    assert alice_client.get(reverse("runs:checkpoint", args=[ticker_run.pk, 99])).status_code == 404


@pytest.mark.django_db
def test_panels_come_out_of_band(alice_client, ticker_run):
    url = reverse("runs:panels", args=[ticker_run.pk])
    body = alice_client.get(url + "?p=effects&p=timeline&p=bogus").content.decode()
    assert body.count('hx-swap-oob="true"') == 2
    assert 'id="panel-effects"' in body and 'id="panel-timeline"' in body


@pytest.mark.django_db
def test_older_events_page_backwards(alice_client, ticker_run):
    url = reverse("runs:events", args=[ticker_run.pk])
    body = alice_client.get(url + "?before=5").content.decode()
    assert [f'data-seq="{n}"' in body for n in (1, 2, 3, 4, 5)] == [True] * 4 + [False]
    assert alice_client.get(url + "?before=x").status_code == 400


@pytest.mark.django_db
def test_a_long_history_renders_its_tail(alice_client, ticker_run):
    from django.utils import timezone

    from runs.models import Run

    now = timezone.now()
    RunEvent.objects.bulk_create([
        RunEvent(run=ticker_run, seq=ticker_run.event_seq + i, kind="log",
                 data={"message": f"m{i}"}, created_at=now) for i in range(1, 601)])
    Run.objects.filter(pk=ticker_run.pk).update(event_seq=ticker_run.event_seq + 600)
    response = alice_client.get(ticker_run.get_absolute_url())
    seqs = [e["seq"] for e in response.context["events"]]
    head = ticker_run.event_seq + 600
    assert seqs == list(range(head - 499, head + 1))
    assert f"before={head - 499}".encode() in response.content  # "load earlier events"


@pytest.mark.django_db
def test_a_failed_run_shows_its_error_on_the_page_and_the_timeline(alice_client, users):
    from runs import services
    from tests.web.conftest import drive

    run = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 2})
    from runs.models import Run

    Run.objects.filter(pk=run.pk).update(inputs={"steps": "two"})  # start() will choke on it
    run = drive(run.pk)
    assert run.status == "failed"
    body = alice_client.get(run.get_absolute_url()).content.decode()
    assert "Failed" in body and 'class="trouble trouble-failed"' in body


@pytest.fixture
def lister_run(launch_and_drive):
    import tests.web.lister_agent  # noqa: F401  (registers lister)

    return launch_and_drive("lister", {"fail_at": 14})


def step_shown(body: str) -> int:
    return int(re.search(r'<dd id="run-step"[^>]*>(\d+)</dd>', body).group(1))


@pytest.mark.django_db
def test_the_step_counter_shows_the_step_the_log_is_at(alice_client, lister_run, users):
    """Checkpoints every 5 steps, failed in step 14: the log's last effect is at step 14,
    the last checkpoint at step 10; the counter says 14, on the page and in its panel."""
    assert lister_run.step_no == 10
    body = alice_client.get(lister_run.get_absolute_url()).content.decode()
    assert step_shown(body) == 14
    assert "last checkpoint: step 10" in body
    panel = alice_client.get(reverse("runs:panels", args=[lister_run.pk]), {"p": "stats"})
    assert step_shown(panel.content.decode()) == 14

    from runs import services

    services.run_rollback(run_id=lister_run.pk, checkpoint=2, user=users["charlie"],
                          reason="again from step 5")  # branch 2: branch 1's steps are not its
    body = alice_client.get(lister_run.get_absolute_url()).content.decode()
    assert step_shown(body) == 5


@pytest.mark.django_db
def test_a_failed_run_has_no_eta_saying_done(alice_client, lister_run, ticker_run):
    failed = alice_client.get(lister_run.get_absolute_url()).content.decode()
    assert '<span id="run-eta">—</span>' in failed
    succeeded = alice_client.get(ticker_run.get_absolute_url()).content.decode()
    assert '<span id="run-eta">done</span>' in succeeded


@pytest.mark.django_db
def test_the_timeline_reads_the_latest_failures_only(ticker_run):
    """A bounded read of the run's own status events (docs/scaling.md): the latest
    `limit` failures and attention stops, oldest first; other status events are not."""
    from runs.selectors import run_trouble_events

    head = ticker_run.event_seq
    statuses = ["failed", "running", "needs_attention", "failed", "needs_attention"]
    RunEvent.objects.bulk_create(RunEvent(run=ticker_run, seq=head + i, kind="status",
                                          data={"status": status})
                                 for i, status in enumerate(statuses, start=1))
    assert [e.seq for e in run_trouble_events(ticker_run, limit=3)] == [head + 3, head + 4,
                                                                        head + 5]
    assert [e.seq for e in run_trouble_events(ticker_run)] == [head + 1, head + 3, head + 4,
                                                               head + 5]
