"""Login throttling (django-axes): AXES_FAILURE_LIMIT wrong passwords for one username
from one address lock that pair out, the login page says so (a 429), and the right
password does not get in until the cool-off ends. Other users and other addresses are
not locked out by it."""

import pytest
from django.conf import settings
from django.test import Client

from runs.web.views.login import lockout_message

pytestmark = pytest.mark.django_db


def attempt(password: str, username: str = "alice", address: str = "203.0.113.7"):
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username,
                                                         "password": password})


def test_repeated_wrong_passwords_lock_the_login_out_with_a_message(users):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = attempt("wrong-password")
        assert response.status_code == 200 and b"Please enter a correct" in response.content
    locked = attempt("wrong-password")
    assert locked.status_code == 429
    assert lockout_message() in locked.content.decode()
    assert b'name="username"' in locked.content  # still the login page, the form kept

    right = attempt("alice-pass-1")
    assert right.status_code == 429, "the right password got in during the lockout"
    assert "_auth_user_id" not in right.wsgi_request.session

    assert attempt("bob-pass-1", username="bob").status_code == 302
    assert attempt("alice-pass-1", address="198.51.100.9").status_code == 302


def test_an_overlong_username_is_a_wrong_login_and_still_counted(users):
    # Django's login form checks no length; axes keeps the name in a 255-character column
    # (on PostgreSQL a longer one was a 500). It is counted under its first 150 characters.
    name = "[" * 5000
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = attempt("wrong-password", username=name)
        assert response.status_code == 200 and b"Please enter a correct" in response.content
    assert attempt("wrong-password", username=name).status_code == 429
