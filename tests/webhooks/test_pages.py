"""Subscription pages: URLs are checked (http(s) only, no private address unless allowed)
with a form error, never a 500; "every run" is for operators; pages are their owner's."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from runs.webhooks.addresses import AddressRefused, check_resolved, check_url
from runs.webhooks.models import Subscription

GOOD = {"url": "https://hooks.example.com/agentops", "description": "CI",
        "events": ["run.ended", "run.needs_attention"], "scope": "mine", "active": "on"}


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_subscribe_edit_rotate_and_delete(users):
    alice = logged_in(users["alice"])
    assert alice.post("/webhooks/new/", GOOD).status_code == 302
    sub = Subscription.objects.get()
    assert (sub.owner, sub.url, sub.events, sub.scope) == (
        users["alice"], GOOD["url"], ["run.ended", "run.needs_attention"], "mine")
    assert sub.secret.startswith("whsec_")
    page = alice.get(f"/webhooks/{sub.pk}/").content.decode()
    assert sub.secret in page and "Nothing delivered yet" in page
    assert alice.post(f"/webhooks/{sub.pk}/", {**GOOD, "events": ["run.waiting_for_input"]}
                      ).status_code == 302
    sub.refresh_from_db()
    assert sub.events == ["run.waiting_for_input"]
    old = sub.secret
    alice.post(f"/webhooks/{sub.pk}/rotate/")
    sub.refresh_from_db()
    assert sub.secret != old and sub.secret.startswith("whsec_")
    assert alice.post(f"/webhooks/{sub.pk}/delete/").status_code == 302
    assert not Subscription.objects.exists()


BAD_URLS = [
    ("ftp://files.example.com/x", "only http:// and https://"),
    ("javascript:alert(1)", "only http:// and https://"),
    ("file:///etc/passwd", "only http:// and https://"),
    ("gopher://example.com/", "only http:// and https://"),
    ("not a url", "spaces or control characters"),
    ("hooks.example.com/x", "only http:// and https://"),
    ("https://", "no host"),
    ("http://[::1", "not a valid URL"),
    ("http://example.com:99999/", "not a valid URL"),
    ("https://user:secret@example.com/", "no user name or password"),
    ("http://10.0.0.8/hook", "private"),
    ("http://169.254.169.254/latest/meta-data", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fd00::1]/", "private"),
    ("http://0.0.0.0/", "private"),
    ("http://example.com/\x00", "Null characters are not allowed"),
    ("", "required"),
    ("https://example.com/" + "a" * 2100, "at most 2000"),
]


@pytest.mark.django_db
@override_settings(WEBHOOKS={"ALLOWED_NETWORKS": ["127.0.0.0/8"], "RETRY_INITIAL": 5.0,
                             "RETRY_MAX_INTERVAL": 3600.0, "RETRY_FOR": 1.0, "TIMEOUT": 1.0})
def test_a_bad_url_is_a_form_error_and_saves_nothing(users):
    alice = logged_in(users["alice"])
    for url, message in BAD_URLS:
        response = alice.post("/webhooks/new/", {**GOOD, "url": url})
        assert response.status_code == 422, url
        errors = response.context["form"].errors
        assert message in " ".join(errors["url"]), (url, errors)
    assert not Subscription.objects.exists()
    # loopback is in this allow-list
    assert alice.post("/webhooks/new/", {**GOOD, "url": "http://127.0.0.1:9/x"}).status_code == 302


@pytest.mark.django_db
def test_other_bad_input_is_a_form_error(users):
    alice = logged_in(users["alice"])
    for change, field in [({"events": []}, "events"), ({"events": ["run.exploded"]}, "events"),
                          ({"scope": "all"}, "scope"), ({"scope": "everything"}, "scope"),
                          ({"description": "x" * 201}, "description")]:
        response = alice.post("/webhooks/new/", {**GOOD, **change})
        assert response.status_code == 422 and field in response.context["form"].errors, change
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_operators_may_subscribe_to_every_run_and_see_every_subscription(users):
    charlie = logged_in(users["charlie"])
    assert charlie.post("/webhooks/new/", {**GOOD, "scope": "all"}).status_code == 302
    alices = Subscription.objects.create(owner=users["alice"], url=GOOD["url"],
                                         events=["run.ended"])
    page = charlie.get(f"/webhooks/{alices.pk}/").content.decode()
    assert alices.url in page and alices.secret not in page  # the secret is its owner's
    bob = logged_in(users["bob"])
    for url in (f"/webhooks/{alices.pk}/", f"/webhooks/{alices.pk}/rotate/",
                f"/webhooks/{alices.pk}/delete/"):
        assert bob.post(url, GOOD).status_code == 404
    assert GOOD["url"] not in bob.get("/webhooks/").content.decode()
    assert Subscription.objects.filter(pk=alices.pk, events=["run.ended"]).exists()


@override_settings(WEBHOOKS={"ALLOWED_NETWORKS": [], "RETRY_INITIAL": 5.0,
                             "RETRY_MAX_INTERVAL": 3600.0, "RETRY_FOR": 1.0, "TIMEOUT": 1.0})
def test_without_an_allow_list_loopback_is_refused_even_by_name():
    for url in ("http://127.0.0.1:8000/x", "http://localhost/x", "http://[::1]/x",
                "http://app.localhost/x", "http://LOCALHOST./x"):
        with pytest.raises(AddressRefused):
            check_url(url)
    # a host name is resolved before each attempt: one that resolves to loopback is refused
    with pytest.raises(AddressRefused, match="127.0.0.1"):
        check_resolved("http://localhost:9/x")
    assert check_url("https://hooks.example.com/x") == "https://hooks.example.com/x"
