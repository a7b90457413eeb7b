"""The pre-call gates' contract (runs/durable/policies/gates.py) on any Store: budgets that pause
and resume without repeating a call, approvals bound to the exact call.

A store's subclass provides the fixtures of tests/durable/contract.py (`store`,
`read_events`, `read_audit`) and two more:

  book                  an ApprovalBook on that store's side (memory, or the database)
  decide(id, approve)   a person's answer to a request in that book
"""

from __future__ import annotations

import time

import pytest

from runs.durable import InputValidationError, control, execute_run
from runs.durable import records as r
from runs.durable.faults import faults
from runs.durable.policies.approvals import APPROVED, PENDING, ApprovalGate
from runs.durable.policies.gates import ALLOW, RunBudgetGate

from .agents_for_tests import WORLD, SimulatedCrash
from .contract import LEASE, Clock, crash_at, worker
from .gate_agents import GATE_REG, price, rules_for


class GateContract:
    @pytest.fixture(autouse=True)
    def _fresh_world(self, store, monkeypatch):
        WORLD.reset()
        WORLD.store = store
        monkeypatch.setattr(faults, "directory", "")
        faults.disarm()
        yield
        faults.disarm()

    @pytest.fixture
    def clock(self, monkeypatch) -> Clock:
        clock = Clock()
        monkeypatch.setattr(time, "time", clock.time)
        return clock

    @pytest.fixture
    def config(self, book):
        return worker(gates=(RunBudgetGate(), ApprovalGate(book, rules_for)), price=price)

    def launch(self, store, agent, inputs=None, **kwargs):
        return control.launch(store, agent=agent, inputs=inputs or {}, registry=GATE_REG,
                              **kwargs)

    def execute(self, store, run_id, config):
        return execute_run(store, run_id, config, registry=GATE_REG)

    def crash(self, store, run_id, config, clock):
        with pytest.raises(SimulatedCrash):
            self.execute(store, run_id, config)
        clock.advance(LEASE + 1)

    @staticmethod
    def calls_logged(store, run_id, tool):
        return [e for e in store.history(run_id).effects if e.tool == tool and not e.superseded]

    # --- the ledger ---------------------------------------------------------------------
    def test_usage_is_recorded_on_each_effect_and_summed_on_the_run(self, store, config):
        run = self.launch(store, "spender", {"calls": 3}, budget={})
        assert self.execute(store, run.id, config) == "succeeded"
        effects = self.calls_logged(store, run.id, "model")
        assert [e.usage for e in effects] == [{"model": "test-model", "prompt_tokens": 100,
                                               "completion_tokens": 50, "cost": 0.51}] * 3
        assert store.get(run.id).usage == {"cost": 1.53, "prompt_tokens": 300,
                                           "completion_tokens": 150, "calls": 3}

    def test_a_replay_after_a_crash_never_counts_a_call_twice(self, store, config, clock):
        run = self.launch(store, "spender", {"calls": 3}, budget={})
        crash_at("before_effect", nth=3)  # two calls logged, the worker dies in the third
        self.crash(store, run.id, config, clock)
        assert store.get(run.id).usage["calls"] == 2
        assert self.execute(store, run.id, config) == "succeeded"
        assert WORLD.calls["model"] == 3  # the two logged calls were replayed, not made
        assert store.get(run.id).usage == {"cost": 1.53, "prompt_tokens": 300,
                                           "completion_tokens": 150, "calls": 3}

    # --- budgets --------------------------------------------------------------------------
    def test_a_budget_reached_mid_step_pauses_at_the_effect_boundary(self, store, config,
                                                                      read_events):
        run = self.launch(store, "spender", {"calls": 3}, budget={"cost": 1.00})
        assert self.execute(store, run.id, config) == "needs_attention"
        held = store.get(run.id)
        assert held.attention["kind"] == "budget"
        assert held.attention["message"] == "budget reached: $1.02 of $1.00"
        assert held.lease_owner is None  # no worker slot held while it waits
        assert WORLD.calls["model"] == 2  # the third call was not made
        assert len(self.calls_logged(store, run.id, "model")) == 2  # nor logged
        assert ("needs_attention", "budget reached: $1.02 of $1.00") in [
            (d["status"], d.get("reason")) for _, kind, d in read_events(run.id) if kind == "status"]

    def test_raising_the_budget_resumes_where_it_stopped_without_repeating_a_call(
            self, store, config, read_audit):
        run = self.launch(store, "spender", {"calls": 3}, budget={"cost": 1.00})
        assert self.execute(store, run.id, config) == "needs_attention"
        raised = control.set_budget(store, run.id, budget={"cost": 2.0}, actor="alice",
                                    reason="worth it")
        assert raised.status == r.QUEUED and raised.budget == {"cost": 2.0}
        assert self.execute(store, run.id, config) == "succeeded"
        assert WORLD.calls["model"] == 3  # calls one and two replayed from the log
        assert store.get(run.id).usage["cost"] == pytest.approx(1.53)
        audit = read_audit(run.id)
        assert [(a.action, a.actor, a.reason) for a in audit] == [("budget", "alice", "worth it")]
        assert audit[0].after["before"] == {"cost": 1.0}
        assert audit[0].after["budget"] == {"cost": 2.0}

    def test_a_raise_that_is_still_reached_leaves_the_run_waiting(self, store, config):
        run = self.launch(store, "spender", {"calls": 3}, budget={"cost": 1.00})
        self.execute(store, run.id, config)
        still = control.set_budget(store, run.id, budget={"cost": 1.01}, actor="alice")
        assert still.status == r.NEEDS_ATTENTION and still.budget == {"cost": 1.01}

    def test_a_token_budget(self, store, config):
        run = self.launch(store, "spender", {"calls": 3}, budget={"tokens": 200})
        assert self.execute(store, run.id, config) == "needs_attention"
        assert store.get(run.id).attention["message"] == "budget reached: 300 of 200 tokens"

    def test_a_bad_budget_changes_nothing(self, store, config):
        run = self.launch(store, "spender", {"calls": 1}, budget={"cost": 1.0})
        for bad in ({"cost": -1}, {"cost": "1"}, {"dollars": 1}, {"cost": float("nan")}, [1]):
            with pytest.raises(InputValidationError):
                control.set_budget(store, run.id, budget=bad, actor="alice")
        assert store.get(run.id).budget == {"cost": 1.0}

    # --- approvals ------------------------------------------------------------------------
    def test_a_call_no_rule_covers_is_not_asked_about(self, store, config, book):
        WORLD.flags["amount"] = 10
        run = self.launch(store, "payer")
        assert self.execute(store, run.id, config) == "succeeded"
        assert book.requests_of(run.id) == []
        assert WORLD.calls["send"] == 1

    def key(self, store, run_id, tool):
        return self.calls_logged(store, run_id, tool)[0].key

    def waiting_request(self, store, run_id, book):
        run = store.get(run_id)
        assert run.status == r.WAITING and run.attention["kind"] == "approval"
        return run.attention["approval"]

    def approve(self, store, decide, run_id, request_id, approve=True):
        decide(request_id, approve)
        return control.lift_hold(store, run_id, kind="approval", match={"approval": request_id},
                                 actor="charlie", action="approve" if approve else "deny")

    def test_an_approved_call_is_made_once_and_the_approval_is_used(self, store, config, book,
                                                                     decide):
        WORLD.flags["amount"] = 5000
        run = self.launch(store, "payer")
        assert self.execute(store, run.id, config) == "waiting"
        request_id = self.waiting_request(store, run.id, book)
        assert store.get(run.id).attention["arguments"] == {"amount": 5000, "to": "bob"}
        assert store.get(run.id).wake_at is None  # no timeout: it waits for a person
        assert WORLD.calls["send"] == 0
        assert self.approve(store, decide, run.id, request_id).status == r.QUEUED
        assert self.execute(store, run.id, config) == "succeeded"
        assert WORLD.calls["send"] == 1
        assert len(WORLD.target.requests) == 1  # the note before it: replayed, not repeated
        key = self.key(store, run.id, "send")
        approved = book.find(run.id, key, self.calls_logged(store, run.id, "send")[0].digest)
        assert approved.status == APPROVED and approved.used_by == key

    def test_a_crash_between_approval_and_call_neither_asks_again_nor_calls_twice(
            self, store, config, book, decide, clock):
        run = self.launch(store, "noter")
        assert self.execute(store, run.id, config) == "waiting"
        request_id = self.waiting_request(store, run.id, book)
        self.approve(store, decide, run.id, request_id)
        crash_at("before_effect")  # approved, past the gate, the worker dies before the call
        self.crash(store, run.id, config, clock)
        assert self.execute(store, run.id, config) == "succeeded"
        assert len(book.requests_of(run.id)) == 1  # not asked again
        assert len(WORLD.target.requests) == 1  # called once

    def test_a_crash_after_an_approved_intent_is_in_doubt_and_its_retry_is_not_asked_again(
            self, store, config, book, decide, clock):
        WORLD.flags["amount"] = 5000
        run = self.launch(store, "payer")
        self.execute(store, run.id, config)
        self.approve(store, decide, run.id, self.waiting_request(store, run.id, book))
        crash_at("before_effect", nth=1)  # the intent of the payment is logged, not its call
        self.crash(store, run.id, config, clock)
        assert self.execute(store, run.id, config) == "needs_attention"  # in doubt: a person
        seq = store.get(run.id).attention["seq"]
        control.resolve_effect(store, run.id, seq=seq, resolution="retry", actor="charlie")
        assert self.execute(store, run.id, config) == "succeeded"
        assert WORLD.calls["send"] == 1
        assert len(book.requests_of(run.id)) == 1

    def test_an_approval_for_other_arguments_does_not_apply(self, store, config, book, decide):
        WORLD.flags["amount"] = 5000
        run = self.launch(store, "payer")
        self.execute(store, run.id, config)
        first = self.waiting_request(store, run.id, book)
        WORLD.flags["amount"] = 7000  # the same position now asks for another payment
        self.approve(store, decide, run.id, first)
        assert self.execute(store, run.id, config) == "waiting"
        second = self.waiting_request(store, run.id, book)
        assert second != first and WORLD.calls["send"] == 0
        requests = {q.id: q for q in book.requests_of(run.id)}
        assert requests[second].arguments == {"amount": 7000, "to": "bob"}
        assert requests[second].status == PENDING
        self.approve(store, decide, run.id, second)
        assert self.execute(store, run.id, config) == "succeeded"
        assert WORLD.args[-1] == ("send", 7000) and WORLD.calls["send"] == 1
        requests = {q.id: q for q in book.requests_of(run.id)}
        assert requests[first].used_by == "" and requests[second].used_by != ""

    def test_a_denied_call_raises_approval_denied_error_in_the_agent(self, store, config, book,
                                                                      decide, clock):
        WORLD.flags["amount"] = 5000
        run = self.launch(store, "payer")
        self.execute(store, run.id, config)
        self.approve(store, decide, run.id, self.waiting_request(store, run.id, book),
                     approve=False)
        assert self.execute(store, run.id, config) == "succeeded"
        output = store.get(run.id).output
        assert output["denied"].startswith("send was denied by")
        assert WORLD.calls["send"] == 0
        refused = self.calls_logged(store, run.id, "send")[0]
        assert refused.status == r.ERROR and refused.error["type"] == "ApprovalDeniedError"

    @pytest.mark.parametrize("fallback", ["deny", "skip"])
    def test_an_unanswered_request_times_out_to_its_fallback(self, store, book, clock,
                                                             fallback, monkeypatch):
        from runs.durable.policies.approvals import ApprovalRule

        from .gate_agents import RULES
        monkeypatch.setitem(RULES, "send", [ApprovalRule(tool="send", approvers="operators",
                                                         timeout=60, fallback=fallback)])
        config = worker(gates=(ApprovalGate(book, rules_for),), price=price)
        WORLD.flags["amount"] = 5000
        run = self.launch(store, "payer")
        assert self.execute(store, run.id, config) == "waiting"
        waiting = store.get(run.id)
        assert waiting.wake_at == pytest.approx(time.time() + 60, abs=5)
        assert run.id not in store.due_runs(time.time())  # the timer holds no worker
        clock.advance(61)
        assert run.id in store.due_runs(time.time())
        assert self.execute(store, run.id, config) == "succeeded"
        assert WORLD.calls["send"] == 0
        output = store.get(run.id).output
        if fallback == "deny":
            assert "not approved in time" in output["denied"]
        else:
            assert output == {"sent": None}
        assert [q.status for q in book.requests_of(run.id)] == ["expired"]

    # --- the worker's database failing under a gate -----------------------------------------
    # Chaos CI (seed 20261): a worker's read of the approval policies met a connection
    # pg_terminate_backend had ended. The gate raised the error, the step took it for the
    # agent's and failed the run, and the record the run's session before had written just
    # before the fault stayed at the target with no effect logged for it.
    def store_down_config(self, book, *first_gates, **settings):
        gates = (*first_gates, RunBudgetGate(), ApprovalGate(book, rules_for))
        settings.setdefault("price", price)
        return worker(gates=gates, store_faults=(DatabaseDown,), **settings)

    def execute_reconnecting(self, store, run_id, config, errors):
        return execute_run(store, run_id, config, registry=GATE_REG,
                           reconnect=lambda error: errors.append(error) or True)

    @pytest.mark.parametrize("moment", ["check", "ended"])
    def test_a_gate_that_meets_the_database_failing_has_the_run_taken_back(self, store, book,
                                                                           moment):
        # "check": before the second call is made; "ended": after its outcome is logged.
        # The failing gate is asked first: the gates after it still hear of the call's end
        # (a share of the run's budget left in flight would hold its later calls).
        gate = FailsOnce(moment, nth=2)
        config = self.store_down_config(book, gate)
        run = self.launch(store, "spender", {"calls": 3}, budget={"cost": 100.0})
        errors = []
        assert self.execute_reconnecting(store, run.id, config, errors) == "succeeded"
        assert [type(error) for error in errors] == [DatabaseDown]
        assert WORLD.calls["model"] == 3  # each call made once: logged, or not yet made
        done = store.get(run.id)
        assert done.crash_count == 0
        assert done.usage == {"cost": 1.53, "prompt_tokens": 300, "completion_tokens": 150,
                              "calls": 3}

    def test_a_price_table_that_meets_the_database_failing_has_the_run_taken_back(
            self, store, book):
        # After the second call returned, before its outcome is logged: it is made again
        # under its key (the tool is idempotent) and counted once.
        config = self.store_down_config(book, price=FailsOnce("price", nth=2).price)
        run = self.launch(store, "spender", {"calls": 3}, budget={})
        errors = []
        assert self.execute_reconnecting(store, run.id, config, errors) == "succeeded"
        assert [type(error) for error in errors] == [DatabaseDown]
        assert [prompt for name, prompt in WORLD.args if name == "model"] == [
            "q0", "q1", "q1", "q2"]
        logged = self.calls_logged(store, run.id, "model")
        assert len({effect.key for effect in logged}) == len(logged) == 3
        assert store.get(run.id).usage == {"cost": 1.53, "prompt_tokens": 300,
                                           "completion_tokens": 150, "calls": 3}

    def test_any_other_error_of_a_gate_is_its_bug_and_fails_the_step(self, store, book):
        config = self.store_down_config(book, FailsOnce("check", nth=2, error=KeyError))
        run = self.launch(store, "spender", {"calls": 3}, budget={})
        errors = []
        assert self.execute_reconnecting(store, run.id, config, errors) == "failed"
        assert errors == []
        assert store.get(run.id).error["type"] == "KeyError"
        assert WORLD.calls["model"] == 1


class DatabaseDown(ConnectionError):
    """What the worker's database raises here (WorkerConfig.store_faults)."""


class FailsOnce:
    """A gate (or a price table) that works, but for its `nth` check, end of an attempt or
    price, which raises `error`."""

    def __init__(self, moment: str, nth: int, error: type[BaseException] = DatabaseDown):
        self.moment, self.nth, self.error = moment, nth, error
        self.seen = 0

    def _maybe_fail(self, moment: str) -> None:
        if moment == self.moment:
            self.seen += 1
            if self.seen == self.nth:
                raise self.error(f"{moment}: server closed the connection unexpectedly")

    def check(self, call):
        self._maybe_fail("check")
        return ALLOW

    def ended(self, tool, record, holder):
        self._maybe_fail("ended")

    def price(self, model, prompt_tokens, completion_tokens):
        self._maybe_fail("price")
        return price(model, prompt_tokens, completion_tokens)
