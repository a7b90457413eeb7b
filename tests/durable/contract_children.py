"""The contract of child runs (ctx.spawn, ctx.wait_all; docs/children.md), on any Store.

Mixed into the store contract's subclasses (tests/durable/test_memory_store.py,
tests/test_store_contract_orm.py, tests/test_store_contract_pg.py), with the same
fixtures. Runs are driven by hand: `drive` executes whatever is due, as the sweep
and the workers would, and checks the cap after every execution.
"""

from __future__ import annotations

import time

import pytest

from runs.durable import Outcome, control, execute_run
from runs.durable import records as r
from runs.durable.faults import faults

from . import agents_children  # noqa: F401 - registers the agents
from .agents_for_tests import REG, WORLD
from .contract import LEASE, crash_at, worker


class ChildrenContract:
    def children(self, store, run_id: str) -> list[r.RunRecord]:
        return store.children(run_id)

    def spawns(self, store, run_id: str) -> list[r.EffectRecord]:
        return sorted((e for e in store.history(run_id).effects if e.kind == r.SPAWN),
                      key=lambda e: e.position)

    def drive(self, store, parent_id: str, cap: int | None = None, rounds: int = 200) -> None:
        """Execute due runs until the parent has ended; the cap holds throughout."""
        for _ in range(rounds):
            if store.get(parent_id).status in r.FINAL_STATUSES:
                return
            due = store.due_runs(time.time())
            assert due, f"nothing due and the parent is {store.get(parent_id).status}"
            for run_id in due:
                self.execute(store, run_id)
                if cap is not None:
                    active = [c for c in self.children(store, parent_id)
                              if c.status not in r.FINAL_STATUSES]
                    assert len(active) <= cap
        raise AssertionError("the parent never ended")

    def test_a_spawn_is_replayed_never_repeated(self, store):
        parent = self.launch(store, "fan_out", {"count": 3})
        assert self.execute(store, parent.id) == Outcome.WAITING
        waiting = store.get(parent.id)
        assert (waiting.lease_owner, waiting.attention["kind"]) == (None, "children")
        assert parent.id not in store.due_runs(time.time())  # no child has ended yet
        children = self.children(store, parent.id)
        assert [c.parent_id for c in children] == [parent.id] * 3
        assert [c.spawn_key for c in children] == [e.key for e in self.spawns(store, parent.id)]
        assert {c.owner for c in children} == {parent.owner}
        for child in children:
            assert self.execute(store, child.id) == Outcome.SUCCEEDED
            assert parent.id in store.due_runs(time.time())  # woken by the child's end
        assert self.execute(store, parent.id) == Outcome.SUCCEEDED
        assert store.get(parent.id).output == {"results": [{"square": i * i} for i in range(3)]}
        assert [c.id for c in self.children(store, parent.id)] == [c.id for c in children]
        assert WORLD.calls["child_work"] == 3

    @pytest.mark.parametrize("nth", [1, 2, 3])
    def test_a_crash_between_a_childs_launch_and_its_log_finds_the_same_child(
            self, store, clock, nth):
        parent = self.launch(store, "fan_out", {"count": 3})
        crash_at("after_spawn_before_log", nth)
        self.crash(store, parent.id, clock)
        launched = self.children(store, parent.id)
        assert len(launched) == nth and len(self.spawns(store, parent.id)) == nth - 1
        self.drive(store, parent.id)
        children = self.children(store, parent.id)
        assert len(children) == 3
        assert [c.id for c in children[:nth]] == [c.id for c in launched]
        assert [e.result["run_id"] for e in self.spawns(store, parent.id)] == \
            [c.id for c in children]
        assert store.get(parent.id).output == {"results": [{"square": i * i} for i in range(3)]}

    def test_wait_all_returns_the_results_in_spawn_order(self, store):
        parent = self.launch(store, "fan_out", {"count": 4})
        self.execute(store, parent.id)
        for child in reversed(self.children(store, parent.id)):  # the last ends first
            assert self.execute(store, child.id) == Outcome.SUCCEEDED
        assert self.execute(store, parent.id) == Outcome.SUCCEEDED
        assert store.get(parent.id).output == {"results": [{"square": i * i} for i in range(4)]}
        # the wait is logged: a replay of the step returns the same, reading no child
        joins = [e for e in store.history(parent.id).effects if e.kind == r.JOIN]
        assert [[c["status"] for c in e.result] for e in joins] == [[r.SUCCEEDED] * 4]

    def test_a_failed_child_raises_in_the_parent_or_stands_in_its_place(self, store):
        parent = self.launch(store, "fan_out", {"count": 3, "fail": [1]})
        self.drive(store, parent.id)
        failed = self.children(store, parent.id)[1]
        assert store.get(parent.id).output == {"failed": failed.id, "status": r.FAILED}
        other = self.launch(store, "fan_out", {"count": 3, "fail": [1],
                                               "return_exceptions": True})
        self.drive(store, other.id)
        assert store.get(other.id).output == {"results": [
            {"square": 0}, "ChildFailedError: failed", {"square": 4}]}

    def test_no_more_children_run_at_once_than_the_cap(self, store):
        parent = self.launch(store, "fan_out", {"count": 7, "cap": 2})
        assert self.execute(store, parent.id) == Outcome.WAITING
        assert len(self.children(store, parent.id)) == 2
        assert store.get(parent.id).attention["waiting_for"] == "slot"
        self.drive(store, parent.id, cap=2)
        assert len(self.children(store, parent.id)) == 7
        assert store.get(parent.id).output == {"results": [{"square": i * i} for i in range(7)]}
        assert WORLD.calls["child_work"] == 7

    def test_a_child_ending_between_the_parents_look_and_its_wait_still_wakes_it(self, store):
        parent = self.launch(store, "fan_out", {"count": 1})

        def child_ends():  # nobody waits on the child yet: the parent is still running
            faults.disarm()
            child = self.children(store, parent.id)[0]
            ended = self.in_thread(lambda: execute_run(store, child.id, worker("w2"),
                                                       registry=REG))
            assert ended.result(timeout=5) == Outcome.SUCCEEDED

        faults.arm("before_children_wait", child_ends)
        assert self.execute(store, parent.id) == Outcome.WAITING
        assert parent.id in store.due_runs(time.time()), \
            "a wait committed after its child ended is woken at once"
        assert self.execute(store, parent.id) == Outcome.SUCCEEDED

    def test_cancelling_the_parent_cancels_its_children(self, store, read_audit):
        parent = self.launch(store, "fan_out", {"count": 3, "child": "child_asks"})
        self.execute(store, parent.id)
        first, second, third = self.children(store, parent.id)
        assert self.execute(store, first.id) == Outcome.WAITING  # waits for an answer
        assert self.execute(store, second.id) == Outcome.WAITING
        control.provide_input(store, second.id, value="yes", actor="u")
        assert self.execute(store, second.id) == Outcome.SUCCEEDED  # ended: left as it is
        # third is still queued
        control.cancel(store, parent.id, actor="op", reason="enough")
        statuses = [c.status for c in self.children(store, parent.id)]
        assert statuses == [r.CANCELLED, r.SUCCEEDED, r.CANCELLED]
        assert store.get(parent.id).status == r.CANCELLED
        for child in (first, third):
            audit = [(a.actor, a.action) for a in read_audit(child.id)]
            assert audit == [("op", "cancel")]

    def test_cancelling_the_parent_cancels_a_running_child(self, store):
        parent = self.launch(store, "fan_out", {"count": 1, "child": "child_blocks"})
        self.execute(store, parent.id)
        child = self.children(store, parent.id)[0]
        running = self.in_thread(lambda: self.execute(store, child.id))
        assert WORLD.started.wait(5)
        control.cancel(store, parent.id, actor="op", reason="enough")
        assert store.get(child.id).control == r.CANCEL
        WORLD.release.set()
        assert running.result(timeout=5) == Outcome.CANCELLED
        assert WORLD.calls["slow_echo"] == 1  # the second call never started
        assert store.get(parent.id).status == r.CANCELLED

    def test_a_store_failing_at_a_spawn_is_not_the_agents_failure(self, store, clock):
        parent = self.launch(store, "fan_out", {"count": 2})
        flaky = _FailingChildren(store)
        assert self.execute(flaky, parent.id) == Outcome.ABANDONED  # not FAILED
        assert store.get(parent.id).status == r.RUNNING and not self.children(store, parent.id)
        clock.advance(LEASE + 1)
        self.drive(store, parent.id)
        assert store.get(parent.id).output == {"results": [{"square": 0}, {"square": 1}]}

    @pytest.mark.parametrize("choice", ["cancel", "keep"])
    def test_a_rollback_past_a_spawn_cancels_or_keeps_the_children(self, store, choice):
        parent = self.launch(store, "fan_out", {"count": 2, "child": "child_asks"})
        self.execute(store, parent.id)
        children = self.children(store, parent.id)
        start = min(c.number for c in store.history(parent.id).checkpoints)
        preview = control.rollback_preview(store, parent.id, checkpoint=start)
        assert [c["run_id"] for c in preview["children"]] == [c.id for c in children]
        control.rollback(store, parent.id, checkpoint=start, actor="op", reason="redo",
                         resume=False, children=choice)
        expected = r.CANCELLED if choice == "cancel" else r.QUEUED
        assert [c.status for c in self.children(store, parent.id)] == [expected] * 2
        # the new branch spawns children of its own under new keys
        control.resume(store, parent.id, actor="op")
        assert self.execute(store, parent.id) == Outcome.WAITING
        assert len(self.children(store, parent.id)) == 4


class _FailingChildren:
    """The store, except that reading a run's children fails once, as a lost connection."""

    def __init__(self, store):
        self._store, self._failed = store, False

    def children(self, run_id, **kwargs):
        if not self._failed:
            self._failed = True
            raise ConnectionError("server closed the connection unexpectedly")
        return self._store.children(run_id, **kwargs)

    def __getattr__(self, name):
        return getattr(self._store, name)
