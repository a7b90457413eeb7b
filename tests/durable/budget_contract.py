"""A run's budget against its parallel calls, on any Store (runs/durable/policies/budget.py): a
group overshoots by at most one call, its waiting calls do not hold the run, the run
is held once the budget is reached and goes on, when it is raised, without making any
call again.

A store's subclass provides `store` (as tests/durable/contract.py's do)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from runs.durable import control, execute_run
from runs.durable import records as r
from runs.durable.faults import faults
from runs.durable.policies.budget import waiters
from runs.durable.policies.gates import ALLOW, RunBudgetGate, Wait
from tests.support.processes import wait_until

from . import budget_agents
from .agents_for_tests import SimulatedCrash
from .budget_agents import BUDGET_REG
from .contract import LEASE, Clock, crash_at, worker

CALL = budget_agents.PROMPT + budget_agents.COMPLETION


def tokens(run: r.RunRecord) -> int:
    return run.usage.get("prompt_tokens", 0) + run.usage.get("completion_tokens", 0)


class WaitOnce:
    """A gate after the run's budget: the first call waits (a long poll), then goes. It
    keeps whether the test had released it each time it was asked again."""

    def __init__(self):
        self.asked, self.released, self.seen = 0, False, []

    def check(self, call):
        self.asked += 1
        if self.asked == 1:
            return Wait("not yet", poll=30.0)
        self.seen.append(self.released)
        return ALLOW


class BudgetContract:
    def thread_ended(self, store) -> None:
        """A thread of the test is done with `store` (a database store closes its
        connection: tests/budgets/test_budgets_orm.py)."""

    @pytest.fixture(autouse=True)
    def _fresh_world(self, monkeypatch):
        budget_agents.reset()
        monkeypatch.setattr(faults, "directory", "")
        faults.disarm()
        yield
        faults.disarm()

    @pytest.fixture
    def config(self):
        return worker(gates=(RunBudgetGate(),))

    @pytest.fixture
    def clock(self, monkeypatch) -> Clock:
        clock = Clock()
        monkeypatch.setattr(time, "time", clock.time)
        return clock

    def launch(self, store, inputs, budget):
        return control.launch(store, agent="fan", inputs=inputs, registry=BUDGET_REG,
                              budget=budget)

    def execute(self, store, run_id, config):
        return execute_run(store, run_id, config, registry=BUDGET_REG)

    def assert_held_at_most_one_call_over(self, store, run_id, limit: int) -> r.RunRecord:
        held = store.get(run_id)
        spent = tokens(held)
        assert held.status == r.NEEDS_ATTENTION
        assert limit <= spent <= limit + CALL  # at most one call over
        assert held.attention["message"] == f"budget reached: {spent:,} of {limit:,} tokens"
        assert held.attention["scope"] == "run"
        made = budget_agents.PROVIDER.made
        assert sum(made.values()) == held.usage["calls"] == spent // CALL  # each call counted
        assert set(made.values()) == {1}
        return held

    @pytest.mark.parametrize("how", ["parallel", "map"])
    def test_a_parallel_group_overshoots_its_budget_by_at_most_one_call(self, store, config,
                                                                        how):
        run = self.launch(store, {"calls": 6, "how": how}, budget={"tokens": 2500})
        assert self.execute(store, run.id, config) == "needs_attention"
        self.assert_held_at_most_one_call_over(store, run.id, 2500)

        raised = control.set_budget(store, run.id, budget={"tokens": 10_000}, actor="alice")
        assert raised.status == r.QUEUED
        assert self.execute(store, run.id, config) == "succeeded"
        # the calls logged before the hold were replayed: none was made twice
        assert budget_agents.PROVIDER.made == Counter({f"q{n}": 1 for n in range(6)})
        assert store.get(run.id).usage == {"cost": 0.0, "prompt_tokens": 4800,
                                           "completion_tokens": 1200, "calls": 6}

    def test_an_attempt_after_a_retry_wait_is_a_call_in_flight_again(self, store, config):
        run = self.launch(store, {"calls": 6, "how": "flaky"}, budget={"tokens": 2500})
        assert self.execute(store, run.id, config) == "needs_attention"
        held = self.assert_held_at_most_one_call_over(store, run.id, 2500)
        # every call made failed once first; the failures cost nothing
        assert set(budget_agents.PROVIDER.failed) >= set(budget_agents.PROVIDER.made)
        assert held.usage["calls"] == len(budget_agents.PROVIDER.made)

    def test_far_from_its_limit_a_group_stays_parallel(self, store, config):
        run = self.launch(store, {"calls": 6, "company": True}, budget={"tokens": 100_000})
        assert self.execute(store, run.id, config) == "succeeded"
        assert budget_agents.PROVIDER.most >= 2
        assert tokens(store.get(run.id)) == 6 * CALL

    def test_a_new_owner_after_a_crash_counts_no_call_twice_nor_the_dead_ones_in_flight(
            self, store, config, clock):
        run = self.launch(store, {"calls": 6}, budget={"tokens": 2500})
        crash_at("before_effect", nth=2)  # a call of the group dies before the model
        with pytest.raises(SimulatedCrash):
            self.execute(store, run.id, config)
        clock.advance(LEASE + 1)
        logged = store.get(run.id).usage["calls"]
        assert sum(budget_agents.PROVIDER.made.values()) == logged
        assert self.execute(store, run.id, config) == "needs_attention"
        self.assert_held_at_most_one_call_over(store, run.id, 2500)

    def test_a_waiting_call_is_decided_again_when_a_call_ended_not_in_a_loop(self, store):
        # The run's budget counts the call, the next gate makes it wait: the budget takes
        # it back (a change for the others), which must not wake the call itself.
        gate = WaitOnce()
        config = worker(gates=(RunBudgetGate(), gate))
        run = self.launch(store, {"calls": 1}, budget={"tokens": 2500})
        outcome = []

        def execute():
            try:
                outcome.append(self.execute(store, run.id, config))
            finally:
                self.thread_ended(store)

        thread = threading.Thread(target=execute)
        thread.start()
        wait_until(lambda: gate.asked >= 1, message="the call asked")
        gate.released = True
        waiters.wake()  # as a call in flight that ended
        thread.join(30)
        assert outcome == ["succeeded"]
        assert gate.seen == [True]  # asked again once woken, not at once
