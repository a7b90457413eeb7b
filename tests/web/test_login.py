"""Logging in and out: Django's auth views with our templates; no sign-up."""

import pytest
from django.urls import NoReverseMatch, reverse


@pytest.mark.django_db
def test_the_pages_need_a_login(client):
    for url in ("/", "/launch/", "/launch/ticker/", "/runs/abc/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/?next=")


@pytest.mark.django_db
def test_it_logs_in_to_my_runs(client, users):
    page = client.get("/login/")
    assert page.status_code == 200
    assert b'name="username"' in page.content and b"Log in" in page.content
    response = client.post("/login/", {"username": "alice", "password": "alice-pass-1"})
    assert response.status_code == 302 and response["Location"] == reverse("runs:list")


@pytest.mark.django_db
def test_a_wrong_password_shows_an_error(client, users):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"form-errors" in response.content


@pytest.mark.django_db
def test_it_logs_out_with_a_post(alice_client):
    assert alice_client.get("/").status_code == 200
    response = alice_client.post("/logout/")
    assert response.status_code == 302
    assert alice_client.get("/").status_code == 302


def test_there_is_no_sign_up():
    for name in ("signup", "register", "django_registration_register"):
        with pytest.raises(NoReverseMatch):
            reverse(name)
