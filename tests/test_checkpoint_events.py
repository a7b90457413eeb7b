"""A checkpoint event holds its checkpoint's number only; its readers (the live feed, the
API, the pages, the CLI) see the branch, step, size and reason read from the checkpoint's
row (runs/selectors.py, with_checkpoints)."""

import math

import pytest

from runs import selectors
from runs.durable import WorkerConfig, control, execute_run
from runs.models import Checkpoint, Run, RunEvent
from runs.storage import database_store
from runs.web.views.present import describe_event
from tests.durable.agents_for_tests import REG

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ran():
    store = database_store()
    run = control.launch(store, agent="steps", inputs={"n": 3}, registry=REG)
    execute_run(store, run.id, WorkerConfig(owner="h:1:t", lease_seconds=1000,
                                            slice_seconds=math.inf), registry=REG)
    return Run.objects.get(pk=run.id)


def test_the_stored_event_holds_the_number_and_its_readers_the_row(ran):
    stored = list(RunEvent.objects.filter(run=ran, kind="checkpoint").order_by("seq")
                  .values_list("data", flat=True))
    assert stored == [{"number": 1}, {"number": 2}, {"number": 3}]
    rows = {c.number: c for c in Checkpoint.objects.filter(run=ran)}
    for events in (selectors.events_after(ran.pk, 0), selectors.events_tail(ran),
                   selectors.events_in_ranges([(ran.pk, 0, ran.event_seq)])):
        read = [e.data for e in events if e.kind == "checkpoint"]
        assert read == [{"number": n, "branch": 1, "step": rows[n].step_no,
                         "size": rows[n].size, "reason": rows[n].reason} for n in (1, 2, 3)]
    last = [e for e in selectors.events_tail(ran) if e.kind == "checkpoint"][-1]
    assert describe_event(last.kind, last.data).startswith("checkpoint #3 at step 2 (branch 1, ")


def test_an_event_whose_checkpoint_is_gone_keeps_its_number(ran):
    Checkpoint.objects.filter(run=ran, number=2).delete()  # as retention does
    read = [e.data for e in selectors.events_after(ran.pk, 0) if e.kind == "checkpoint"]
    assert read[1] == {"number": 2} and read[2]["step"] == 2
    assert describe_event("checkpoint", read[1]) == "checkpoint #2"


def test_an_event_written_before_keeps_what_it_holds(ran):
    old = {"number": 1, "branch": 1, "step": 0, "size": 9, "reason": "start"}
    RunEvent.objects.filter(run=ran, kind="checkpoint", data__number=1).update(data=old)
    read = [e.data for e in selectors.events_after(ran.pk, 0) if e.kind == "checkpoint"]
    assert read[0] == old
