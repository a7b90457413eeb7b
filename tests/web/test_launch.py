"""Launch: agent picker, a form built from the input schema, server-side validation."""

import pytest
from django.urls import reverse

from runs.durable import Agent, Done, agent, registry
from runs.models import Run


@pytest.fixture
def strict_agent():
    """An agent whose schema has every kind of field, and a rule only the engine knows."""
    name = "web-form-test"

    @agent(name, version="3", input_schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "what to call it", "maxLength": 40},
            "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
            "ratio": {"type": "number", "default": 0.5},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
            "loud": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
        "required": ["title"],
    })
    class WebFormTest(Agent):
        """An agent for the launch form tests."""

        def step(self, ctx, state):
            return Done(state)

    yield name
    registry.agents.pop(name, None)


@pytest.mark.django_db
def test_it_shows_every_agent(alice_client):
    response = alice_client.get(reverse("runs:launch"))
    body = response.content.decode()
    for name in ("ticker", "ask", "shout", "steps"):
        assert f'href="/launch/{name}/"' in body
    assert "Counts slowly, with logs and progress" in body  # the description


@pytest.mark.django_db
def test_the_form_comes_from_the_schema(alice_client, strict_agent):
    response = alice_client.get(reverse("runs:launch", args=[strict_agent]))
    form = response.context["form"]
    assert list(form.fields) == ["title", "count", "ratio", "mode", "loud", "tags", "code"]
    assert form.fields["title"].required and not form.fields["count"].required
    assert form.fields["count"].initial == 3 and form.fields["count"].max_value == 10
    assert form.fields["title"].help_text == "what to call it"
    body = response.content.decode()
    assert 'name="count"' in body and 'value="3"' in body and 'max="10"' in body
    assert "what to call it" in body
    assert '<option value="&quot;slow&quot;" selected>slow</option>' in body


@pytest.mark.django_db
def test_errors_are_shown_next_to_the_fields(alice_client, strict_agent):
    url = reverse("runs:launch", args=[strict_agent])
    response = alice_client.post(url, {"title": "", "count": "99", "tags": "[1,"})
    assert response.status_code == 422
    errors = response.context["form"].errors
    assert set(errors) == {"title", "count", "tags"}
    assert "less than or equal to 10" in errors["count"][0]
    assert "not valid JSON" in errors["tags"][0]
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_the_engines_own_validation_lands_on_the_field(alice_client, strict_agent):
    url = reverse("runs:launch", args=[strict_agent])
    response = alice_client.post(url, {"title": "x", "code": "abc", "mode": '"fast"'})
    assert response.status_code == 422
    assert "does not match" in response.context["form"].errors["code"][0]
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_launching_redirects_to_the_run_page(alice_client, strict_agent, users):
    url = reverse("runs:launch", args=[strict_agent])
    response = alice_client.post(url, {"title": "hello", "count": "2", "mode": '"fast"',
                                       "loud": "on", "tags": '["a", "b"]', "ratio": ""})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == run.get_absolute_url()
    assert run.owner == users["alice"] and run.agent == strict_agent and run.agent_version == "3"
    assert run.inputs == {"title": "hello", "count": 2, "ratio": 0.5, "mode": "fast",
                          "loud": True, "tags": ["a", "b"]}


@pytest.mark.django_db
def test_htmx_launch_redirects_with_a_header(alice_client):
    response = alice_client.post(reverse("runs:launch", args=["ticker"]), {"steps": "2"},
                                 headers={"HX-Request": "true", "HX-Target": "launch-panel"})
    run = Run.objects.get()
    assert response["HX-Redirect"] == run.get_absolute_url()


@pytest.mark.django_db
def test_htmx_errors_return_the_form_fragment(alice_client):
    response = alice_client.post(reverse("runs:launch", args=["ticker"]), {"steps": "0"},
                                 headers={"HX-Request": "true", "HX-Target": "launch-panel"})
    assert response.status_code == 422
    body = response.content.decode()
    assert "<html" not in body and "field-error" in body


@pytest.mark.django_db
def test_an_unknown_agent_is_a_404(alice_client):
    assert alice_client.get("/launch/no-such-agent/").status_code == 404
    assert alice_client.post("/launch/no-such-agent/", {}).status_code == 404
