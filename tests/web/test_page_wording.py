"""What the run page says, word for word: a stream's size in characters (one character,
two characters), and a rate and ETA measured on the run's branch only, never on the
progress of the branch a rollback went back on."""

from __future__ import annotations

import pytest

from runs import services
from runs.web.views.present import describe_event
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("text", "said"), [("a", "1 character"), ("", "0 characters"),
                                            ("ab", "2 characters")])
def test_a_stream_says_how_many_characters(text, said):
    line = describe_event("stream", {"tool": "llm", "text": text, "attempt": 1, "offset": 0})
    assert line == f"llm streamed {said} (attempt 1, from 0)"


def samples_shown(client, run_id: str) -> list[dict]:
    return client.get(f"/runs/{run_id}/").context["progress_samples"]


def test_the_rate_after_a_rollback_counts_the_new_branch_only(users, alice_client):
    run = services.run_launch(user=users["alice"], agent="ticker",
                              inputs={"steps": 6, "delay": 0})
    drive(run.pk)
    assert [s["done"] for s in samples_shown(alice_client, run.pk)] == [1, 2, 3, 4, 5, 6]

    # Held paused on the new branch: nothing measured yet, so no rate (the old one's
    # six steps in a moment made "rate 6/s" of a run that does not move)
    services.run_rollback(run_id=run.pk, checkpoint=3, user=users["charlie"],
                          reason="again from step 2", resume=False)
    assert samples_shown(alice_client, run.pk) == []

    services.run_resume(run_id=run.pk, user=users["charlie"], reason="go")
    drive(run.pk)
    assert [s["done"] for s in samples_shown(alice_client, run.pk)] == [3, 4, 5, 6]
