"""Hostile input on every URL of the project: every named URL pattern (pages, operator
pages, the admin, the sandbox) is made concrete, fetched, and then every query
parameter its links use and every field of every form it shows is sent the classes of
input that once gave a 500: a NUL character, a lone surrogate in JSON, JSON nested
tens of thousands deep, `Infinity` and `1e999`, an over-long integer, text that is not
JSON. Each answer is below 500; input the project must refuse (a NUL anywhere, the
JSON classes in a JSON field) gets a clear error and leaves the database as it was.

Requests are made as a superuser who owns the runs, so every page and form is there.
"""

from __future__ import annotations

import base64
from urllib.parse import urlencode, urlsplit

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.messages import get_messages
from django.core.cache import cache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.conftest import snapshot
from tests.fuzz.endpoints import Form, every_url, make_world, page_inputs

pytestmark = pytest.mark.django_db

DEEP = "[" * 50_000 + "]" * 50_000
JSON_HOSTILE = {
    "lone surrogate": '["\\ud800"]',
    "lone surrogate key": '{"\\udfff": 1}',
    "deep nesting": DEEP,
    "deep object": '{"a":' * 20_000 + "1" + "}" * 20_000,
    "infinity": '{"x": Infinity}',
    "out of range float": '{"x": 1e999}',
    "NaN": "NaN",
    "NUL escape": '{"x": "a\\u0000b"}',
    "integer too long": "9" * 5000,
    "not JSON": '{"a": [1, 2',
}
NUL = "x\x00y"
# Forms these tests must not submit: they end the session the others need.
SKIPPED_ACTIONS = ("/logout/", "/admin/logout/")
ERROR_MARKERS = (b"errorlist", b"form-errors", b"field-error", b"message-error",
                 b"errornote", b"NUL", b"not valid", b"error")


@pytest.fixture
def world(django_user_model):
    yield make_world(django_user_model)
    cache.clear()  # the pages cached figures of this test's runs (the storage total)


def full_snapshot() -> dict:
    """The engine's tables and the accounts: what a refused request must leave alone."""
    from django.contrib.auth import get_user_model

    return {**snapshot(),
            "users": sorted(get_user_model().objects.values_list(
                "id", "username", "password", "is_active", "is_staff", "is_superuser")),
            "groups": sorted(Group.objects.values_list("id", "name")),
            "group_perms": Permission.objects.filter(group__isnull=False).count()}


def shows_error(client, response) -> bool:
    """A 4xx with a body, or a page (or the page redirected to) that shows an error."""
    if 400 <= response.status_code < 500:
        return bool(response.content.strip())
    if response.status_code in (301, 302, 303):
        if any(m.level_tag == "error" for m in get_messages(response.wsgi_request)):
            return True
        response = client.get(response["Location"])
    return any(marker in response.content for marker in ERROR_MARKERS)


def surveyed(client, world) -> tuple[list[tuple[str, set[str]]], list[Form]]:
    """Every URL with the query parameter names its page uses, and every form shown."""
    pages, forms = [], {}
    for url in every_url(world):
        response = client.get(url)
        assert response.status_code < 500, url
        found, names = ([], set())
        if "html" in response.get("Content-Type", ""):
            found, names = page_inputs(f"http://testserver{url}", response.content.decode())
        pages.append((url, names | {"q", "page", "status", "agent", "after", "before", "id"}))
        for form in found:
            if not urlsplit(form.action).path.endswith(SKIPPED_ACTIONS):
                forms.setdefault((form.action, form.method, tuple(sorted(form.names))), form)
    return pages, list(forms.values())


def send(client, form: Form, data: dict):
    path = urlsplit(form.action).path
    if form.method == "post":
        return client.post(path, data)
    return client.get(f"{path}?{urlencode(data)}")


# every form of every page, the admin's included: minutes on a loaded machine
@pytest.mark.timeout(900)
def test_every_query_parameter_and_form_field_refuses_hostile_input(client, world):
    client.force_login(world["root"])
    pages, forms = surveyed(client, world)
    assert len(pages) > 100 and len(forms) > 20, (len(pages), len(forms))
    assert any(form.json_fields for form in forms), "no JSON field found on any page"
    for url, names in pages:
        before = full_snapshot()
        for name in sorted(names):
            response = client.get(f"{url}?{urlencode({name: NUL})}")
            assert response.status_code == 400, (url, name, response.status_code)
            assert b"NUL" in response.content, (url, name)
        assert client.get(f"{url}?{urlencode({NUL: '1'})}").status_code == 400, url
        assert full_snapshot() == before, url
    # a well-formed cursor whose run id holds a NUL: no NUL in the parameter itself
    cursor = base64.urlsafe_b64encode(b"2026-01-01T00:00:00+00:00|a\x00b").decode()
    for name in ("after", "before"):
        assert client.get(f"/ops/?{name}={cursor}").status_code == 200
    for form in forms:
        for name in sorted(form.names - {"csrfmiddlewaretoken"}):  # checked by its own test
            hostile = {"NUL": NUL, **(JSON_HOSTILE if name in form.json_fields else {})}
            for kind, value in hostile.items():
                before = full_snapshot()
                response = send(client, form, {**form.fields, name: value})
                where = (form.action, name, kind)
                assert response.status_code < 500, where
                if form.method == "post" and name not in form.checkboxes:
                    assert shows_error(client, response), where
                    assert full_snapshot() == before, where
            # the form itself, as the page would send it, gets no 5xx either
    for form in forms:
        if form.method == "get":
            assert send(client, form, form.fields).status_code < 500, form.action


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=30) | st.sampled_from(
    list(JSON_HOSTILE.values()) + [NUL, "", "-1", "0", "9" * 30, "true", "null"])


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_random_values_in_every_form_never_give_a_server_error(client, world, data):
    client.force_login(world["root"])
    if "forms" not in world:  # the fixture lives for all examples: survey once
        world["forms"] = [f for f in surveyed(client, world)[1] if "/admin/" not in f.action]
    form = data.draw(st.sampled_from(world["forms"]))
    names = sorted(form.names)
    changed = data.draw(st.dictionaries(st.sampled_from(names), texts, min_size=1))
    before = full_snapshot()
    response = send(client, form, {**form.fields, **changed})
    assert response.status_code < 500, (form.action, changed)
    if response.status_code >= 400:
        assert full_snapshot() == before, (form.action, changed)
