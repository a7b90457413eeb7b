"""A user's actions on their own run: cancel, answer a question."""

import pytest
from django.urls import reverse

from runs import services
from runs.models import AuditEntry, Run

HTMX = {"HX-Request": "true"}


@pytest.fixture
def waiting_run(launch_and_drive):
    run = launch_and_drive("ask", {"question": "What is <your> name?"})
    assert run.status == "waiting"
    return run


@pytest.mark.django_db
def test_the_question_is_asked_with_a_form_from_its_schema(alice_client, waiting_run):
    body = alice_client.get(waiting_run.get_absolute_url()).content.decode()
    assert "The run is waiting for you" in body
    assert "What is &lt;your&gt; name?" in body
    assert 'name="answer-name"' in body and reverse("runs:input", args=[waiting_run.pk]) in body


@pytest.mark.django_db
def test_answering_queues_the_run(alice_client, waiting_run):
    response = alice_client.post(reverse("runs:input", args=[waiting_run.pk]),
                                 {"answer-name": "Ada"})
    assert response.status_code == 302
    run = Run.objects.get(pk=waiting_run.pk)
    assert run.status == "queued" and run.attention is None
    assert AuditEntry.objects.filter(run=run, action="input", actor="alice").exists()


@pytest.mark.django_db
def test_an_invalid_answer_is_refused_next_to_its_field(alice_client, waiting_run):
    response = alice_client.post(reverse("runs:input", args=[waiting_run.pk]),
                                 {"answer-name": ""}, headers=HTMX)
    assert response.status_code == 422
    body = response.content.decode()
    assert 'id="panel-input"' in body and "field-error" in body
    assert Run.objects.get(pk=waiting_run.pk).status == "waiting"


@pytest.mark.django_db
def test_answering_with_htmx_returns_fresh_panels(alice_client, waiting_run):
    response = alice_client.post(reverse("runs:input", args=[waiting_run.pk]),
                                 {"answer-name": "Ada"}, headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and 'id="panel-input"' in body
    assert "The run is waiting for you" not in body


@pytest.mark.django_db
def test_answering_twice_is_a_clear_error(alice_client, waiting_run):
    url = reverse("runs:input", args=[waiting_run.pk])
    alice_client.post(url, {"answer-name": "Ada"})
    response = alice_client.post(url, {"answer-name": "Bob"}, headers=HTMX)
    assert response.status_code == 409
    assert b"not waiting for input" in response.content


@pytest.mark.django_db
def test_a_user_can_cancel_their_run(alice_client, users):
    run = services.run_launch(user=users["alice"], agent="ticker", inputs={})
    response = alice_client.post(reverse("runs:cancel", args=[run.pk]), headers=HTMX)
    assert response.status_code == 200
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    assert b"Cancel run" not in response.content
    entry = AuditEntry.objects.get(run=run, action="cancel")
    assert entry.actor == "alice"


@pytest.mark.django_db
def test_cancelling_a_finished_run_says_why(alice_client, launch_and_drive):
    run = launch_and_drive("shout")
    response = alice_client.post(reverse("runs:cancel", args=[run.pk]), headers=HTMX)
    assert response.status_code == 409
    assert b"cannot cancel a run that is succeeded" in response.content
    response = alice_client.post(reverse("runs:cancel", args=[run.pk]), follow=True)
    assert b"cannot cancel a run that is succeeded" in response.content  # as a message


@pytest.mark.django_db
def test_actions_are_post_only(alice_client, waiting_run):
    for name in ("runs:cancel", "runs:input"):
        assert alice_client.get(reverse(name, args=[waiting_run.pk])).status_code == 405
