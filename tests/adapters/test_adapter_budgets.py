"""Both adapters' model requests are metered calls: the run's budget is asked before each
is made (a reached budget holds the run, as it holds the built-in assistant), each
request's usage is recorded on its effect and summed on the run, and the step replayed
once the budget is raised counts no request twice."""

from __future__ import annotations

import pytest

from runs.durable import WorkerConfig, control, execute_run
from runs.durable import records as r
from runs.durable.memory import MemoryStore
from tests import adapter_agents as agents
from tests.adapters.test_adapters import (
    BUILD,
    INPUTS,
    check_ledger,
    check_nothing_repeated_after_its_log,
    plain_answer,
    price,
    registry,
    run_to_end,
)
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()


def model_requests(store, run_id) -> list:
    return [e for e in store.history(run_id).effects
            if e.tool.endswith(("model_request", "model_call"))]


@pytest.mark.parametrize("budget", [{"tokens": 1}, {"cost": 0.00001}])
@pytest.mark.parametrize("name", list(BUILD))
def test_a_reached_budget_holds_an_adapter_agent_before_its_next_model_request(
        name, budget, world):
    expected = plain_answer(name)
    agents.JOURNAL.entries.clear()
    store, reg = MemoryStore(), registry()
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg, budget=budget)
    held = run_to_end(store, reg, run.id, world, [])

    # The first request crossed the budget (a call's cost is known once it returned);
    # the second was not made: held, nothing written at its position.
    assert held.status == r.NEEDS_ATTENTION, held.error
    assert held.attention["kind"] == "budget"
    assert held.attention["message"].startswith("budget reached: ")
    assert held.attention["tool"].endswith(("model_request", "model_call"))
    [first] = model_requests(store, run.id)
    assert first.status == r.DONE
    assert check_ledger(store, run.id)["calls"] == 1
    served = [e for e in agents.JOURNAL.entries if e["kind"] == "model"]
    assert len(served) == 1

    # Raised: the step is replayed up to the held request (the first is not asked for
    # again, nor counted again) and the run goes on to the answer.
    control.set_budget(store, run.id, budget={"tokens": 10**6}, actor="alice",
                       reason="more")
    done = run_to_end(store, reg, run.id, world, [])
    assert done.status == r.SUCCEEDED, (done.error, done.attention)
    assert done.output["answer"] == expected
    requests = model_requests(store, run.id)
    assert requests[0].key == first.key and requests[0].usage == first.usage
    totals = check_ledger(store, run.id)
    assert totals["calls"] == len(requests) > 1
    check_nothing_repeated_after_its_log(store, run.id)


@pytest.mark.parametrize("name", list(BUILD))
def test_the_budget_is_asked_about_model_requests_only(name, world):
    """A run under its budget is never held; its tool calls are not metered."""
    store, reg = MemoryStore(), registry()
    run = control.launch(store, agent=name, inputs=INPUTS, registry=reg,
                         budget={"cost": 1.0})
    config = WorkerConfig(owner="w1", lease_seconds=30, slice_seconds=60, price=price)
    assert execute_run(store, run.id, config, registry=reg) == "succeeded"
    effects = store.history(run.id).effects
    assert all(e.usage is None for e in effects if e.tool.startswith("tool."))
    assert check_ledger(store, run.id)["cost"] < 1.0
