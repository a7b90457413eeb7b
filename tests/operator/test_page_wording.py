"""What the operator's pages and the admin say, word for word: when a call in doubt
started (the time, or "not recorded", never "?"), the admin's own name and its plural of
delivery."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.template.loader import render_to_string

from runs.models import Effect
from tests.operator.conftest import in_doubt_run

pytestmark = pytest.mark.django_db

STARTED = re.compile(r"<dt>started</dt><dd>(.*?)</dd>", re.S)


def started_text(html: str) -> str:
    found = STARTED.search(html)
    assert found, html[:2000]
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_a_call_in_doubt_shows_when_it_started(ops, users):
    """The engine writes the call's start with its intent, before the call: a worker that
    dies in the call leaves a time the operator can look up at the target."""
    run = in_doubt_run(users["alice"])
    effect = Effect.objects.get(key=run.attention["key"])
    assert effect.status == "intent" and effect.started_at is not None
    assert run.attention["started_at"] == pytest.approx(effect.started_at.timestamp())
    shown = effect.started_at.strftime("%Y-%m-%d %H:%M:%S")
    for url in (f"/ops/runs/{run.pk}/", "/ops/attention/"):
        text = started_text(ops.get(url).content.decode())
        assert text.startswith(shown) and text.endswith("ago)"), (url, text)


class Run:
    """What the cause partial reads of a run."""

    status = "needs_attention"
    error = None

    def __init__(self, **attention):
        self.attention = {"kind": "in_doubt", "tool": "post_note", "key": "k", "seq": 1,
                          "step_no": 2, "worker": "", **attention}


@pytest.mark.parametrize("started_at", [0.0, None])
def test_a_start_that_was_not_recorded_says_so(started_at):
    # 0.0 is what the engine's record holds for a time never set: not 1970, not "?"
    html = render_to_string("operator/_cause.html",
                            {"run": Run(started_at=started_at), "effect": None})
    assert started_text(html) == "not recorded"
    assert "<dt>on worker</dt><dd>not recorded</dd>" in html


def test_a_start_the_attention_recorded_is_shown_without_its_effect_row():
    at = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    html = render_to_string("operator/_cause.html",
                            {"run": Run(started_at=at.timestamp()), "effect": None})
    assert started_text(html).startswith("2026-03-04 05:06:07 (")


def test_the_admin_is_named_after_the_product(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "root-pass-1")
    client.force_login(root)
    page = client.get("/admin/").content.decode()
    assert "<title>Site administration | agentops administration</title>" in page
    assert '<a href="/admin/">agentops administration</a>' in page
    assert "Django administration" not in page
    assert ">Deliveries</a>" in page and "Deliverys" not in page
