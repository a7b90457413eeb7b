"""Both adapters on the ORM store (SQLite or PostgreSQL): the engine's writes are made
from a coroutine of the step's event loop, where Django refuses database access unless
the adapter sets the loop aside for them (runs/adapters/effects.py)."""

import pytest

from runs.durable import Outcome, WorkerConfig, control, execute_run
from runs.models import Effect, Run
from runs.storage.orm import OrmStore
from tests import adapter_agents as agents
from tests.adapters.conftest import Records
from tests.adapters.test_adapters import BUILD, INPUTS, plain_answer, registry
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("name", list(BUILD))
def test_a_run_of_an_sdk_agent_on_the_orm_store(name, monkeypatch):
    monkeypatch.setattr(agents, "POST", Records().post)
    expected = plain_answer(name)
    store, reg = OrmStore(), registry()
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg)
    config = WorkerConfig(owner="w1", lease_seconds=30, slice_seconds=60)
    assert execute_run(store, run.id, config, registry=reg) == Outcome.SUCCEEDED
    row = Run.objects.get(pk=run.id)
    assert row.output["answer"] == expected
    tools = Effect.objects.filter(run=row, tool__startswith="tool.", status="done").count()
    assert tools == 6
