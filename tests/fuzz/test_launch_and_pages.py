"""Bad input to the launch form and the run pages: fuzzed forms, wrong types, malformed
JSON, oversized inputs, unknown agents and run ids, requests without a CSRF token and
requests for another user's runs. Each gets a clear error, nothing in the database
changes, and the server keeps serving."""

import json

import jsonschema
import pytest
from django.conf import settings as django_settings
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runs import services
from runs.durable.registry import registry
from runs.models import Run
from tests.fuzz.conftest import snapshot

pytestmark = pytest.mark.django_db

AGENTS = ["steps", "ticker", "ask", "crawl", "migrate", "assistant"]
FUZZ = settings(max_examples=30, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
NASTY = ["", " ", "true", "null", "[]", "{}", "1e309", "NaN", "-Infinity", "-1", "0x10",
         "99999999999999999999999", "{\"a\":", "[1, 2", "\x00", "<script>alert(1)</script>",
         "'; DROP TABLE runs_run; --", "\ud800".encode("utf-8", "surrogatepass").decode("latin-1")]
values = st.one_of(st.sampled_from(NASTY), st.text(max_size=40), st.integers().map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(str),
                   st.lists(st.integers(), max_size=3).map(json.dumps))


def fields_of(agent: str) -> list[str]:
    return list(type(registry.get(agent)).input_schema.get("properties", {}))


@st.composite
def launch_posts(draw):
    agent = draw(st.sampled_from(AGENTS))
    names = fields_of(agent) + ["junk", "csrfmiddlewaretoken", "__all__"]
    data = draw(st.dictionaries(st.sampled_from(names), values, max_size=len(names)))
    return agent, data


@FUZZ
@given(post=launch_posts())
def test_fuzzed_launch_forms_launch_a_valid_run_or_say_why(client_for, post):
    agent, data = post
    client = client_for("alice")
    before = snapshot()
    response = client.post(f"/launch/{agent}/", data)
    assert response.status_code in (302, 422), response.status_code
    if response.status_code == 422:
        assert snapshot() == before, "a refused launch changed the database"
        assert b"error" in response.content.lower()
        return
    run = Run.objects.order_by("-created_at").first()
    assert response["Location"].endswith(f"/runs/{run.id}/")
    jsonschema.validate(run.inputs, type(registry.get(agent)).input_schema)


def test_oversized_inputs_get_a_clear_limit(client_for):
    limit = django_settings.AGENTOPS["MAX_INPUT_BYTES"]
    client = client_for("alice")
    before = snapshot()
    response = client.post("/launch/ask/", {"question": "x" * (limit + 1)})
    assert response.status_code in (400, 413, 422)
    assert snapshot() == before
    assert str(limit) in response.content.decode() or b"too large" in response.content.lower()


def test_oversized_requests_are_refused_before_the_form(client_for):
    client = client_for("alice")
    before = snapshot()
    too_big = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    response = client.post("/launch/ask/", {"question": "x" * too_big})
    assert response.status_code == 413  # Payload Too Large, on a styled page (runs/web/views/errors.py)
    assert snapshot() == before


def test_malformed_json_and_wrong_types_are_named_next_to_their_field(client_for):
    client = client_for("alice")
    before = snapshot()
    bad_json = client.post("/launch/assistant/", {"question": "hi", "follow_ups": "[1, 2"})
    assert bad_json.status_code == 422 and b"not valid JSON" in bad_json.content
    wrong_type = client.post("/launch/assistant/", {"question": "hi", "follow_ups": "{}"})
    assert wrong_type.status_code == 422 and b"expected a JSON array" in wrong_type.content
    not_a_number = client.post("/launch/steps/", {"steps": "many"})
    assert not_a_number.status_code == 422
    out_of_range = client.post("/launch/steps/", {"steps": "0"})
    assert out_of_range.status_code == 422
    assert snapshot() == before


@FUZZ
@given(name=st.text(min_size=1, max_size=60).filter(lambda s: "/" not in s and s.strip()))
def test_unknown_agents_are_404(client_for, name):
    if name in registry.names():
        return
    client = client_for("alice")
    before = snapshot()
    for method in (client.get, client.post):
        response = method(f"/launch/{_quote(name)}/", {"steps": "1"})
        assert response.status_code == 404
    assert snapshot() == before


def _quote(text: str) -> str:
    from urllib.parse import quote
    return quote(text, safe="")


@FUZZ
@given(run_id=st.text(min_size=1, max_size=80).filter(lambda s: s.strip()))
# PostgreSQL raises on a NUL in a text parameter (CI found it once by chance).
@example(run_id="\x00")
@example(run_id="a" * 33)
def test_unknown_run_ids_are_404_everywhere(client_for, run_id):
    client = client_for("alice")
    before = snapshot()
    path = f"/runs/{_quote(run_id)}"
    for url in (f"{path}/", f"{path}/panels/", f"{path}/events/", f"{path}/output.json",
                f"{path}/checkpoints/1/"):
        assert client.get(url).status_code == 404, url
    for url in (f"{path}/cancel/", f"{path}/input/"):
        assert client.post(url, {"name": "x"}).status_code == 404, url
    assert snapshot() == before


@pytest.fixture
def alices_waiting_run(users):
    """An `ask` run of alice's, waiting for her answer."""
    from tests.web.conftest import drive
    run = services.run_launch(user=users["alice"], agent="ask", inputs={})
    run = drive(run.pk)
    assert run.status == "waiting"
    return run


def test_another_users_run_is_invisible_and_untouchable(client_for, alices_waiting_run):
    bob = client_for("bob")
    run = alices_waiting_run
    before = snapshot()
    for url in (f"/runs/{run.id}/", f"/runs/{run.id}/panels/", f"/runs/{run.id}/output.json",
                f"/runs/{run.id}/events/", f"/runs/{run.id}/checkpoints/1/"):
        assert bob.get(url).status_code == 404, url
    assert bob.post(f"/runs/{run.id}/cancel/").status_code == 404
    assert bob.post(f"/runs/{run.id}/input/", {"name": "mallory"}).status_code == 404
    assert snapshot() == before
    assert client_for("alice").get(f"/runs/{run.id}/").status_code == 200  # still serving


def test_posts_without_a_csrf_token_are_refused(users, alices_waiting_run):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["alice"])
    run = alices_waiting_run
    before = snapshot()
    assert client.post("/launch/steps/", {"steps": "3"}).status_code == 403
    assert client.post(f"/runs/{run.id}/cancel/").status_code == 403
    assert client.post(f"/runs/{run.id}/input/", {"name": "alice"}).status_code == 403
    assert snapshot() == before
    assert client.get("/").status_code == 200


def test_anonymous_requests_go_to_the_login_page(alices_waiting_run):
    client = Client()
    before = snapshot()
    for url in ("/", "/launch/steps/", f"/runs/{alices_waiting_run.id}/"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    assert client.post("/launch/steps/", {"steps": "3"}).status_code == 302
    assert snapshot() == before


@FUZZ
@given(answer=st.dictionaries(st.sampled_from(["name", "value", "junk"]), values, max_size=3))
def test_fuzzed_answers_are_accepted_only_when_valid(client_for, alices_waiting_run, answer):
    client = client_for("alice")
    run = Run.objects.get(pk=alices_waiting_run.pk)
    before = snapshot()
    response = client.post(f"/runs/{run.id}/input/", answer)
    assert response.status_code in (302, 409, 422)
    run.refresh_from_db()
    if run.status == "waiting":
        assert snapshot() == before
    else:  # accepted: then it was a valid answer to "name"
        effect = run.effects.get(kind="input")
        assert isinstance(effect.result.get("name"), str) and effect.result["name"]
