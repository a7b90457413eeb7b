"""Every POST needs a CSRF token: login, logout, launch, cancel, answer."""

import pytest
from django.test import Client
from django.urls import reverse

from runs import services
from runs.models import Run


@pytest.fixture
def strict_client(users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["alice"])
    return client


@pytest.mark.django_db
def test_every_post_without_a_token_is_refused(strict_client, users, launch_and_drive):
    waiting = launch_and_drive("ask")
    queued = services.run_launch(user=users["alice"], agent="ticker", inputs={})
    posts = [
        (reverse("runs:launch", args=["ticker"]), {"steps": "2"}),
        (reverse("runs:cancel", args=[queued.pk]), {}),
        (reverse("runs:input", args=[waiting.pk]), {"answer-name": "Ada"}),
        (reverse("logout"), {}),
    ]
    for url, data in posts:
        assert strict_client.post(url, data).status_code == 403, url
    assert Client(enforce_csrf_checks=True).post(
        "/login/", {"username": "alice", "password": "alice-pass-1"}).status_code == 403
    assert Run.objects.get(pk=queued.pk).status == "queued"
    assert Run.objects.get(pk=waiting.pk).status == "waiting"
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_with_the_token_it_works(strict_client):
    page = strict_client.get(reverse("runs:launch", args=["ticker"]))
    token = page.context["csrf_token"]
    assert f'"X-CSRFToken": "{token}"' in page.content.decode()  # for htmx requests
    response = strict_client.post(reverse("runs:launch", args=["ticker"]), {"steps": "2"},
                                  headers={"X-CSRFToken": str(token)})
    assert response.status_code == 302
