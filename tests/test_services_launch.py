"""run_launch: the run it returns is the row in the database, queued, and its commit is
the whole launch: no task is sent anywhere (a free worker slot polls the due runs)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import services
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)
FIELDS = ("id", "owner_id", "agent", "agent_version", "inputs", "status", "branch", "step_no",
          "epoch", "event_seq", "created_at", "updated_at", "lease_owner", "control")


def test_the_launched_run_is_the_stored_row_and_is_queued(users):
    with CaptureQueriesContext(connection) as queries:
        run = services.run_launch(user=users["alice"], agent="steps",
                                  inputs={"n": 2})
    stored = Run.objects.get(pk=run.id)
    assert {f: getattr(run, f) for f in FIELDS} == {f: getattr(stored, f) for f in FIELDS}
    assert run.owner == users["alice"] and run.get_absolute_url().endswith(f"{run.id}/")
    assert stored.status == "queued" and stored.enqueued_at is None  # no task sent
    assert not any(q["sql"].startswith('SELECT "runs_run"') for q in queries.captured_queries)
