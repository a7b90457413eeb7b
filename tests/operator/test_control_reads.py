"""What an operator action reads: the run row for pause, resume and cancel, whatever the
length of its history; for a rollback, what it supersedes and the few forks it
needs. Counted in SQL statements and in records handed to the engine, not timed."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import services
from runs.durable import records as r
from runs.models import Effect, Run
from tests.operator.conftest import launch
from tests.support.long_history import give_history

pytestmark = pytest.mark.django_db
HISTORY = 10_000
LOG_TABLES = ("runs_effect", "runs_checkpoint")


def statements(action) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        action()
    return [q["sql"] for q in captured.captured_queries]


def test_pause_resume_and_cancel_read_no_effect_or_checkpoint_row(users):
    run = give_history(launch(users["alice"], steps=1), HISTORY)
    pause = statements(lambda: services.run_pause(run_id=run.pk, user="op", reason="look"))
    resume = statements(lambda: services.run_resume(run_id=run.pk, user="op", reason="ok"))
    cancel = statements(lambda: services.run_cancel(run_id=run.pk, user="op", reason="stop"))
    assert Run.objects.get(pk=run.pk).control == r.CANCEL
    for sql in pause + resume + cancel:
        assert not any(table in sql for table in LOG_TABLES), sql
    # the run read once, then the commit (update, read back, events, audit; and a
    # savepoint's two on a test's transaction): the same few on any run; a cancel also
    # looks for the run's children, to cancel them with it (docs/children.md)
    assert max(len(pause), len(resume)) <= 7 and len(cancel) <= 8


class CountingStore:
    """The services' store, counting the checkpoints and effects it hands the engine."""

    def __init__(self, inner):
        self.inner, self.records = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def load(self, run_id):
        loaded = self.inner.load(run_id)
        self.records += len(loaded.effects) + (loaded.checkpoint is not None) + len(loaded.bases)
        return loaded

    def history(self, run_id, query=None):
        history = self.inner.history(run_id, query)
        self.records += len(history.checkpoints) + len(history.effects)
        return history


@pytest.fixture
def counting(monkeypatch):
    counter = CountingStore(services.store())
    monkeypatch.setattr(services, "store", lambda: counter)
    return counter


def test_a_rollback_reads_what_it_supersedes_not_the_whole_history(users, counting):
    run = give_history(launch(users["alice"], steps=1), HISTORY, status="paused")
    last_but_one = run.step_no - 1  # checkpoint n is the state after step n
    preview = services.run_rollback_preview(run_id=run.pk, checkpoint=last_but_one)
    assert len(preview["effects"]) == 2 and counting.records <= 4
    counting.records = 0
    statements_run = statements(lambda: services.run_rollback(
        run_id=run.pk, checkpoint=last_but_one, user="op", reason="redo the last step"))
    assert counting.records <= 2  # the target checkpoint (and forks: none yet)
    assert Effect.objects.filter(run_id=run.pk, superseded=True).count() == 2
    assert Run.objects.get(pk=run.pk).status == r.PAUSED
    # no statement reads effects or checkpoints beyond the target and the forks
    for sql in statements_run:
        if "runs_effect" in sql and sql.lstrip().upper().startswith("SELECT"):
            raise AssertionError(f"a rollback read effects: {sql}")


def test_a_second_rollback_reads_only_the_forks_and_what_it_supersedes(users, counting):
    run = give_history(launch(users["alice"], steps=1), HISTORY, status="paused")
    services.run_rollback(run_id=run.pk, checkpoint=run.step_no - 1, user="op", reason="one")
    counting.records = 0
    preview = services.run_rollback_preview(run_id=run.pk, checkpoint=run.step_no - 2)
    # the fork, its parent, the target; the two live calls of the step after it
    assert len(preview["effects"]) == 2 and counting.records <= 5
