"""The store contract: the engine's semantics (docs/ARCHITECTURE.md, invariants 1-9) on any Store.

Every store runs this same suite by subclassing `StoreContract` and providing
three fixtures:

  store                 a fresh, empty Store
  read_events(run_id)   -> [(seq, kind, data), ...] of the run, oldest first
  read_audit(run_id)    -> [record with actor, action, reason, before, after], oldest first

The tests drive the real engine (`execute_run`, `control.*`) and assert only
through the Store protocol, `control`, and the two readers above. Agents and
tools live in `agents_for_tests.py`; their effects on the outside world are
observed through `WORLD`, reset before each test.

A subclass whose store needs per-thread cleanup may override `in_thread`.
Time is controlled by the `clock` fixture, which shifts `time.time()`: a store
must compare times with the `now` it is given (claim, due_runs) or with
`time.time()`, never with a clock of its own.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from runs.durable import (
    AgentNotFoundError,
    CheckpointNotFoundError,
    FencedError,
    InputValidationError,
    InvalidTransitionError,
    Outcome,
    RunNotFoundError,
    StateNotSerializableError,
    WorkerConfig,
    control,
    execute_run,
    idempotency_key,
    serde,
    upgrade,
)
from runs.durable import records as r
from runs.durable.errors import StaleEditError, StatePatchError
from runs.durable.executor import MAX_RECONNECTS
from runs.durable.faults import InjectedFault, faults
from runs.durable.serde import decode_state

from .agents_for_tests import ANSWER_SCHEMA, REG, REG_V2, WORLD, SimulatedCrash

# A worker's lease in the contract. The tests end it by moving the clock past it
# (clock.advance(LEASE + 1)), never by waiting, so it is long: a lease of 2 s ran out in
# real time on a loaded machine (load average 57) between a simulated crash and the
# check that the dead worker's lease still holds, and failed that check.
LEASE = 60.0
_real_time = time.time


class Clock:
    """`time.time()` shifted by an offset the test moves forward. A frozen clock moves
    only when the test moves it, for a test that compares durations: the real time that
    passes between two readings (50 ms on a loaded machine) would be in them."""

    def __init__(self, frozen: bool = False):
        self.offset = 0.0
        self.frozen_at = _real_time() if frozen else None

    def time(self) -> float:
        now = _real_time() if self.frozen_at is None else self.frozen_at
        return now + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def worker(owner: str = "w1", **settings) -> WorkerConfig:
    settings.setdefault("lease_seconds", LEASE)
    settings.setdefault("slice_seconds", 30.0)
    return WorkerConfig(owner=owner, **settings)


def crash_at(point: str, nth: int = 1) -> None:
    """Arm a named fault point: the worker dies the `nth` time it is reached."""
    hits = [0]

    def action():
        hits[0] += 1
        if hits[0] == nth:
            faults.disarm()
            raise SimulatedCrash(point)

    faults.arm(point, action)


def wait_until(condition, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class StoreContract:
    # --- fixtures and helpers ------------------------------------------------------------
    @pytest.fixture(autouse=True)
    def _fresh_world(self, store, monkeypatch):
        WORLD.reset()
        WORLD.store = store
        monkeypatch.setattr(faults, "directory", "")
        faults.disarm()
        yield
        faults.disarm()
        WORLD.release.set()  # never leave a worker thread blocked in a tool

    @pytest.fixture
    def clock(self, monkeypatch) -> Clock:
        clock = Clock()
        monkeypatch.setattr(time, "time", clock.time)
        return clock

    def in_thread(self, fn) -> Future:
        """Run `fn` in a worker thread of its own."""
        pool = ThreadPoolExecutor(max_workers=1)
        future = pool.submit(fn)
        pool.shutdown(wait=False)
        return future

    def launch(self, store, agent: str, inputs: dict | None = None, **kwargs) -> r.RunRecord:
        return control.launch(store, agent=agent, inputs=inputs or {}, registry=REG, **kwargs)

    def execute(self, store, run_id: str, config: WorkerConfig | None = None, **kwargs) -> str:
        kwargs.setdefault("registry", REG)
        return execute_run(store, run_id, config or worker(), **kwargs)

    def crash(self, store, run_id: str, clock: Clock, config: WorkerConfig | None = None,
              **kwargs) -> None:
        """Execute until the planned crash kills the worker, then let its lease run out."""
        with pytest.raises(SimulatedCrash):
            self.execute(store, run_id, config, **kwargs)
        assert store.load(run_id).run.lease_owner is not None, "a crash releases nothing"
        assert run_id not in store.due_runs(time.time()), "the dead worker's lease still holds"
        clock.advance((config.lease_seconds if config else LEASE) + 1)
        assert run_id in store.due_runs(time.time())

    @staticmethod
    def status(store, run_id: str) -> str:
        return store.load(run_id).run.status

    @staticmethod
    def checkpoint_steps(store, run_id: str, branch: int = 1) -> list[int]:
        return [c.step_no for c in store.history(run_id).checkpoints if c.branch == branch]

    @staticmethod
    def checkpoint_event_steps(store, run_id: str, events) -> list[int]:
        """The steps of the checkpoints the run's checkpoint events announce: an event
        holds its checkpoint's number, nothing of what the checkpoint holds."""
        steps = {c.number: c.step_no for c in store.history(run_id).checkpoints}
        announced = [d for _, kind, d in events if kind == "checkpoint"]
        assert all(set(d) == {"number"} for d in announced), announced
        return [steps[d["number"]] for d in announced]

    @staticmethod
    def logs(events) -> list[str]:
        return [data["message"] for _, kind, data in events if kind == "log"]

    @staticmethod
    def statuses(events) -> list[str]:
        return [data["status"] for _, kind, data in events if kind == "status"]

    # --- 1. checkpoints ------------------------------------------------------------------
    def test_multi_step_run_succeeds_with_its_output(self, store):
        run = self.launch(store, "steps", {"n": 3})
        assert run.status == r.QUEUED and run.agent_version == "1"
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        done = store.load(run.id).run
        assert done.status == r.SUCCEEDED
        assert done.output == {"values": [10, 20, 30]}
        assert done.step_no == 3
        assert done.lease_owner is None
        assert WORLD.calls["bump"] == 3

    def test_a_checkpoint_after_every_step_by_default(self, store):
        run = self.launch(store, "steps", {"n": 3})
        self.execute(store, run.id)
        checkpoints = store.history(run.id).checkpoints
        assert [(c.step_no, c.reason) for c in checkpoints] == [
            (0, "start"), (1, "step"), (2, "step")]  # the last step returned Done
        assert len({c.number for c in checkpoints}) == 3
        for c in checkpoints:
            assert decode_state(c.blob, c.codec)["i"] == c.step_no

    def test_checkpoint_every_n_steps(self, store):
        run = self.launch(store, "steps_every2", {"n": 5})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert self.checkpoint_steps(store, run.id) == [0, 2, 4]

    def test_checkpoint_seconds_checkpoints_by_time(self, store):
        run = self.launch(store, "steps_timed", {"n": 5})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        # every=1000 never fires; only the slow step 3 crossed the 0.25 s interval
        assert self.checkpoint_steps(store, run.id) == [0, 3]

    def test_a_step_that_changes_nothing_writes_no_checkpoint(self, store, clock):
        run = self.launch(store, "poller", {"n": 4})
        WORLD.crash_plan["after_call"] = 3
        self.crash(store, run.id, clock)
        assert self.checkpoint_steps(store, run.id) == [0]  # steps 1-2 changed nothing
        assert store.load(run.id).run.step_no == 2  # their ends are committed all the same
        WORLD.seen.clear()
        assert self.execute(store, run.id, worker("w2")) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"polls": 4}
        # steps 1-3 replayed from the log (their calls made once), 4 ran live
        assert WORLD.seen == [("step", 1, True), ("step", 2, True), ("step", 3, True),
                              ("step", 4, False)]
        assert WORLD.calls["echo"] == 4
        assert self.checkpoint_steps(store, run.id) == [0]

    def test_a_wait_checkpoints_the_steps_that_changed_nothing(self, store, clock):
        """A polling run's wake replays the step that waited, not every poll before it."""
        run = self.launch(store, "poller", {"n": 4, "sleep_at": 3})
        assert self.execute(store, run.id) == Outcome.WAITING
        checkpoints = store.history(run.id).checkpoints
        assert [(c.step_no, c.reason) for c in checkpoints] == [(0, "start"), (2, "wait")]
        clock.advance(31)
        WORLD.seen.clear()
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert WORLD.seen == [("step", 3, True), ("step", 4, False)]
        assert WORLD.calls["echo"] == 4

    @staticmethod
    def latest_state(store, run_id: str) -> tuple[int, str, dict]:
        """(step, reason, state) of the checkpoint a resume of the run starts from."""
        loaded = store.load(run_id)
        raw = serde.resolve_raw([*loaded.bases, loaded.checkpoint])
        return loaded.checkpoint.step_no, loaded.checkpoint.reason, json.loads(raw)

    def test_a_hand_off_mid_step_checkpoints_the_state_the_steps_before_it_left(self, store):
        """A step changes its state in place, then a shutdown stops it at its next call
        (as a killed worker's tree hands its other runs off): the checkpoint written for
        the steps before it holds their state, not the cut step's half-done changes,
        or the replay of the cut step takes another item than its log holds."""
        run = self.launch(store, "queue_walker", {"items": ["a", "b", "c"], "shutdown_at": 2})
        assert self.execute(store, run.id, worker(lease_seconds=60),
                            stop_event=WORLD.stop_event) == Outcome.HANDED_OFF
        assert self.latest_state(store, run.id)[:2] == (1, "shutdown")
        assert self.latest_state(store, run.id)[2]["queue"] == ["b", "c"]
        assert self.execute(store, run.id, worker("w2")) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == ["a", "b", "c"]
        assert [a for name, a in WORLD.args if name == "echo"] == [
            "a", "a taken", "b", "b taken", "c", "c taken"]  # "b" logged once, replayed

    def test_a_wait_after_unchanged_steps_checkpoints_the_state_before_the_waiting_step(
            self, store, clock):
        """Steps that changed nothing, then one that changes its state in place and waits:
        the wait's checkpoint holds the state the unchanged steps left, and the wake
        replays the waiting step from it."""
        run = self.launch(store, "queue_poller", {"items": ["a", "b"], "polls": 2,
                                                  "sleep_at": 3})
        assert self.execute(store, run.id) == Outcome.WAITING
        step_no, reason, state = self.latest_state(store, run.id)
        assert (step_no, reason, state["queue"]) == (2, "wait", ["a", "b"])
        clock.advance(31)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == ["a", "b"]
        assert [a for name, a in WORLD.args if name == "echo"] == [
            "poll 1", "poll 2", "a", "a taken", "b", "b taken"]

    def test_resume_restores_the_latest_checkpoint_and_replays_only_since(self, store, clock,
                                                                          read_events):
        run = self.launch(store, "steps_every2", {"n": 5})
        WORLD.crash_plan["after_call"] = 4
        self.crash(store, run.id, clock)
        assert WORLD.calls["bump"] == 4
        loaded = store.load(run.id)
        assert loaded.checkpoint.step_no == 2
        assert [(e.step_no, e.status) for e in loaded.effects] == [(3, r.DONE), (4, r.DONE)]

        WORLD.seen.clear()
        assert self.execute(store, run.id, worker("w2")) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"values": [10, 20, 30, 40, 50]}
        assert [a for name, a in WORLD.args if name == "bump"] == [1, 2, 3, 4, 5]
        # steps 1-2 never ran again; 3-4 replayed from the log; 5 ran live
        assert WORLD.seen == [("step", 3, True), ("step", 4, True), ("step", 5, False)]
        resumed = [d for _, kind, d in read_events(run.id) if kind == "status" and
                   "resumed_from" in d]
        assert [(d["resumed_from"], d["after"]) for d in resumed] == [(loaded.checkpoint.number,
                                                                       "crash")]

    def test_a_crash_inside_the_checkpoint_transaction_leaves_no_trace(self, store, clock,
                                                                       read_events):
        run = self.launch(store, "steps", {"n": 2})
        crash_at("after_checkpoint_before_event", nth=2)  # the checkpoint of step 1
        self.crash(store, run.id, clock)
        assert self.checkpoint_steps(store, run.id) == [0]
        events = read_events(run.id)
        assert self.checkpoint_event_steps(store, run.id, events) == [0]
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert WORLD.calls["bump"] == 2  # step 1's call was logged before: replayed
        events = read_events(run.id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        assert self.checkpoint_event_steps(store, run.id, events) == [0, 1]

    def test_a_crash_just_after_a_checkpoint_resumes_from_it(self, store, clock):
        run = self.launch(store, "steps", {"n": 3})
        crash_at("after_checkpoint", nth=2)  # the checkpoint of step 1 is committed
        self.crash(store, run.id, clock)
        assert store.load(run.id).checkpoint.step_no == 1
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert [a for name, a in WORLD.args if name == "bump"] == [1, 2, 3]
        assert WORLD.seen == [("step", 1, False), ("step", 2, False), ("step", 3, False)]

    def test_a_crash_while_handing_back_a_slice_loses_nothing(self, store, clock):
        run = self.launch(store, "steps_every10", {"n": 2})
        crash_at("before_release")
        self.crash(store, run.id, clock, worker(slice_seconds=0))
        assert store.load(run.id).checkpoint.reason == "slice"  # written before the release
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"values": [10, 20]}
        assert WORLD.calls["bump"] == 2

    def test_a_cancel_that_lands_while_a_slice_is_handed_back_is_kept(self, store):
        # The cancel arrives after the session last read the run's control, just before
        # its slice's release: the release must not clear it (chaos, seed 4242: the run
        # went on to succeed after its cancel was accepted).
        run = self.launch(store, "steps_every10", {"n": 2})

        def operator_cancels():
            faults.disarm()
            control.cancel(store, run.id, actor="op", reason="stop it")

        faults.arm("before_release", operator_cancels)
        assert self.execute(store, run.id, worker(slice_seconds=0)) == Outcome.YIELDED
        assert store.load(run.id).run.control == r.CANCEL
        bumps = WORLD.calls["bump"]
        assert self.execute(store, run.id) == Outcome.CANCELLED
        assert store.load(run.id).run.status == r.CANCELLED
        assert WORLD.calls["bump"] == bumps

    def test_only_one_of_two_racing_claims_wins(self, store):
        run = self.launch(store, "steps")
        barrier = threading.Barrier(2)

        def claim(owner):
            barrier.wait(5)
            return store.claim(run.id, owner, 30, time.time())

        claims = [self.in_thread(lambda owner=owner: claim(owner)) for owner in ("w1", "w2")]
        results = [c.result(timeout=10) for c in claims]
        winners = [c for c in results if c is not None]
        assert len(winners) == 1
        assert store.load(run.id).run.lease_owner == winners[0].run.lease_owner
        assert store.load(run.id).run.epoch == winners[0].run.epoch

    # --- 9. events -------------------------------------------------------------------------
    def test_events_are_numbered_without_gaps_and_report_every_change(self, store, read_events):
        run = self.launch(store, "steps", {"n": 3})
        self.execute(store, run.id)
        events = read_events(run.id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        assert store.load(run.id).run.event_seq == len(events)
        assert self.statuses(events) == [r.QUEUED, r.RUNNING, r.SUCCEEDED]
        kinds = {kind for _, kind, _ in events}
        assert {"status", "effect", "checkpoint", "log", "progress", "output"} <= kinds
        checkpoints = [d for _, kind, d in events if kind == "checkpoint"]
        history = store.history(run.id)
        assert [d["number"] for d in checkpoints] == [c.number for c in history.checkpoints]
        effects = [(d["step"], d["status"]) for _, kind, d in events if kind == "effect"]
        assert effects == [(1, r.INTENT), (1, r.DONE), (2, r.INTENT), (2, r.DONE),
                           (3, r.INTENT), (3, r.DONE)]
        assert self.logs(events) == [f"step {i} {w}" for i in (1, 2, 3) for w in ("begins", "ends")]
        progress = [(d["done"], d["total"]) for _, kind, d in events if kind == "progress"]
        assert progress == [(1, 3), (2, 3), (3, 3)]
        assert [d["output"] for _, kind, d in events if kind == "output"] == [
            {"values": [10, 20, 30]}]

    def test_a_log_written_before_a_crash_is_not_repeated_by_the_replay(self, store, clock,
                                                                         read_events):
        run = self.launch(store, "steps", {"n": 2})
        WORLD.crash_plan["after_call"] = 2
        self.crash(store, run.id, clock)
        assert "step 2 begins" in self.logs(read_events(run.id))
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        events = read_events(run.id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        assert self.logs(events) == ["step 1 begins", "step 1 ends", "step 2 begins",
                                     "step 2 ends"]
        effects = [(d["step"], d["status"]) for _, kind, d in events if kind == "effect"]
        assert effects == [(1, r.INTENT), (1, r.DONE), (2, r.INTENT), (2, r.DONE)]

    # --- 2. deterministic replay -------------------------------------------------------------
    def test_a_crash_mid_step_replays_logged_results_without_calling_tools(self, store, clock):
        run = self.launch(store, "nondet")
        WORLD.crash_plan["after_first"] = 1
        self.crash(store, run.id, clock)
        assert WORLD.args == [("echo", "a")]
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"a": "a", "b": "b"}
        assert WORLD.args == [("echo", "a"), ("echo", "b")]

    def test_a_crash_at_a_fault_point_replays_the_calls_logged_before_it(self, store, clock):
        run = self.launch(store, "keys", {"n": 3})
        crash_at("before_effect", nth=3)  # the second call of step 2, before the tool runs
        self.crash(store, run.id, clock)
        assert WORLD.calls["post_record"] == 2
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"ids": [1, 2, 3, 4]}
        keys = WORLD.target.keys()
        assert len(keys) == len(set(keys)) == 4  # nothing reached the target twice

    def test_now_and_random_return_the_recorded_values_on_replay(self, store, clock):
        run = self.launch(store, "replay_values")
        WORLD.crash_plan["after_first"] = 1
        self.crash(store, run.id, clock)
        clock.advance(100)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        first, replayed = WORLD.seen
        assert replayed == first
        output = store.load(run.id).run.output
        assert (output["t"], output["x"]) == first
        assert output["t"] < time.time() - 100
        assert 0 <= output["x"] < 1

    def test_a_changed_call_on_replay_is_non_determinism(self, store, clock, read_events):
        run = self.launch(store, "nondet")
        WORLD.crash_plan["after_first"] = 1
        self.crash(store, run.id, clock)
        WORLD.flags["arg"] = "changed"
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        stuck = store.load(run.id).run
        assert stuck.status == r.NEEDS_ATTENTION
        attention = stuck.attention
        assert attention["kind"] == "non_determinism"
        assert attention["recorded"]["tool"] == attention["attempted"]["tool"] == "tests.echo"
        assert attention["recorded"]["args_preview"] == "'a'"
        assert attention["attempted"]["args_preview"] == "'changed'"
        assert "'a'" in attention["message"] and "'changed'" in attention["message"]
        assert attention["position"] == [1, 1, 0]
        assert WORLD.args == [("echo", "a")]  # the changed call never reached the tool
        assert self.statuses(read_events(run.id))[-1] == r.NEEDS_ATTENTION
        # resuming the same code meets the same mismatch: never on
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        assert WORLD.args == [("echo", "a")]

    def test_an_agent_catching_exception_cannot_swallow_non_determinism(self, store, clock):
        run = self.launch(store, "careless")
        WORLD.crash_plan["after_call"] = 2
        self.crash(store, run.id, clock)
        WORLD.flags["arg"] = "changed"
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        assert store.load(run.id).run.attention["kind"] == "non_determinism"
        assert WORLD.args == [("echo", "a"), ("echo", "b")]  # "c" was never called

    def test_an_agent_catching_exception_cannot_swallow_an_in_doubt_effect(self, store, clock):
        run = self.launch(store, "careless_mail")
        crash_at("after_effect_before_log")
        self.crash(store, run.id, clock)
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        assert store.load(run.id).run.attention["kind"] == "in_doubt"
        assert (WORLD.calls["send_email"], WORLD.calls["echo"]) == (1, 0)

    def test_non_determinism_can_continue_on_a_new_branch(self, store, clock):
        run = self.launch(store, "nondet")
        WORLD.crash_plan["after_first"] = 1
        self.crash(store, run.id, clock)
        WORLD.flags["arg"] = "changed"
        self.execute(store, run.id)
        upgraded = upgrade.upgrade(store, run.id, actor="op", registry=REG)
        assert (upgraded.status, upgraded.branch) == (r.QUEUED, 2)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"a": "changed", "b": "b"}
        # The logged call the changed code no longer makes was carried onto the new
        # branch under its key, and never taken over: it waits at a negative seq.
        effects = store.history(run.id).effects
        assert not [e for e in effects if e.branch == 1 and e.step_no == 1]
        carried = [e for e in effects if e.carried]
        assert [(e.branch, e.step_no, e.key) for e in carried] == [
            (2, 1, idempotency_key(run.id, 1, 1, 0))]
        assert WORLD.args == [("echo", "a"), ("echo", "changed"), ("echo", "b")]

    # --- 3. idempotency keys -------------------------------------------------------------------
    def test_idempotency_keys_derive_from_run_branch_step_and_seq(self, store):
        run = self.launch(store, "keys", {"n": 3})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        expected = [idempotency_key(run.id, 1, step, seq)
                    for step, seq in ((1, 0), (2, 0), (2, 1), (3, 0))]
        assert WORLD.target.keys() == expected
        calls = [e for e in store.history(run.id).effects if e.kind == r.CALL]
        assert [e.key for e in calls] == expected
        assert all(e.idempotent for e in calls)

    def test_idempotency_keys_are_new_after_a_rollback(self, store):
        run = self.launch(store, "keys", {"n": 3})
        self.execute(store, run.id)
        first = WORLD.target.keys()
        step1 = next(c for c in store.history(run.id).checkpoints if c.step_no == 1)
        control.rollback(store, run.id, checkpoint=step1.number, actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        again = WORLD.target.keys()[len(first):]
        assert again == [idempotency_key(run.id, 2, step, seq)
                         for step, seq in ((2, 0), (2, 1), (3, 0))]
        assert not set(again) & set(first)
        assert store.load(run.id).run.output == {"ids": [1, 5, 6, 7]}

    # --- 4. in-doubt effects -------------------------------------------------------------------
    def test_an_in_doubt_idempotent_call_is_repeated_with_the_same_key(self, store, clock):
        run = self.launch(store, "keys", {"n": 3})
        crash_at("after_effect_before_log")  # the target did the work; the log never knew
        self.crash(store, run.id, clock)
        assert WORLD.target.keys() == [idempotency_key(run.id, 1, 1, 0)]
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        keys = WORLD.target.keys()
        assert keys[:2] == [idempotency_key(run.id, 1, 1, 0)] * 2  # re-sent with the same key
        assert len(WORLD.target.work) == 4  # ...and the target did that work once
        assert store.load(run.id).run.output == {"ids": [1, 2, 3, 4]}

    def test_a_cancel_after_a_crash_first_logs_the_cut_off_idempotent_call(self, store, clock):
        run = self.launch(store, "keys", {"n": 3})
        crash_at("after_effect_before_log")  # the target did the work; the log never knew
        self.crash(store, run.id, clock)
        control.cancel(store, run.id, actor="op", reason="changed my mind")
        assert self.execute(store, run.id) == Outcome.CANCELLED
        key = idempotency_key(run.id, 1, 1, 0)
        assert WORLD.target.keys() == [key, key]  # re-sent under its key, nothing new
        assert len(WORLD.target.work) == 1
        calls = [e for e in store.history(run.id).effects if e.kind == r.CALL]
        assert [(e.key, e.status) for e in calls] == [(key, r.DONE)]
        assert store.load(run.id).run.status == r.CANCELLED

    def test_a_cancel_landing_just_after_a_crashs_reclaim_still_logs_the_cut_off_call(
            self, store, clock):
        # Chaos (SQLite, seed 20261): the cancel came after the new worker's claim, while
        # it replayed towards the call the dead one had left in flight.
        run = self.launch(store, "keys", {"n": 3})
        crash_at("after_effect_before_log")
        self.crash(store, run.id, clock)
        assert self.execute(_CancelAfterClaim(store), run.id) == Outcome.CANCELLED
        key = idempotency_key(run.id, 1, 1, 0)
        assert WORLD.target.keys() == [key, key]  # re-sent under its key, nothing new
        calls = [e for e in store.history(run.id).effects if e.kind == r.CALL]
        assert [(e.key, e.status) for e in calls] == [(key, r.DONE)]

    def test_a_cancel_after_a_crash_starts_no_non_idempotent_call(self, store, clock):
        run = self.launch(store, "in_doubt")
        crash_at("after_effect_before_log")
        self.crash(store, run.id, clock)
        control.cancel(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.CANCELLED
        assert WORLD.calls["send_email"] == 1

    def test_a_cancel_after_a_crash_settles_at_most_one_idempotent_call(self, store, clock):
        run = self.launch(store, "keys", {"n": 3})
        # Dead after step 1's checkpoint: whether step 2's first call had gone out is
        # unknowable (an idempotent call writes no intent), so it is sent, once, and
        # logged; its sibling in the same step is not.
        crash_at("after_checkpoint", nth=2)
        self.crash(store, run.id, clock)
        control.cancel(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.CANCELLED
        assert WORLD.target.keys() == [idempotency_key(run.id, 1, 1, 0),
                                       idempotency_key(run.id, 1, 2, 0)]
        assert [e.key for e in store.history(run.id).effects if e.kind == r.CALL] == \
            WORLD.target.keys()

    def test_a_replayed_result_is_the_live_one_byte_for_byte(self, store, clock):
        # PostgreSQL's jsonb reorders keys: an SDK that serialised a replayed tool
        # result for its model sent other bytes than the live run had.
        run = self.launch(store, "ordered")
        crash_at("before_effect", nth=2)  # after the first call's outcome is logged
        self.crash(store, run.id, clock)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        live, replayed = WORLD.seen
        assert replayed == live
        assert json.loads(live) == {"count": 2, "hits": ["b", "a"],
                                    "nested": {"a": [{"b": 1, "y": 0}], "z": 1}}

    def test_a_store_failing_mid_run_leaves_the_run_as_a_crash_would(self, store, clock):
        # A database restart mid-commit: not the agent's failure, so not a failed run.
        run = self.launch(store, "keys", {"n": 3})
        flaky = _FailingCommits(store, lambda c: any(
            (e.step_no, e.seq) == (2, 0) for e in c.effects))
        assert self.execute(flaky, run.id) == Outcome.ABANDONED
        left = store.load(run.id).run
        assert (left.status, left.error) == (r.RUNNING, None)
        assert left.lease_owner is not None  # nothing more was written, not even a release
        clock.advance(LEASE + 1)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"ids": [1, 2, 3, 4]}
        key = idempotency_key(run.id, 1, 2, 0)
        assert WORLD.target.keys().count(key) == 2  # re-sent under its key...
        assert len(WORLD.target.work) == 4  # ...and done once

    def test_a_store_failing_mid_run_is_taken_back_once_it_answers(self, store, clock):
        # The worker waits for the database (reconnect) instead of for the lease.
        run = self.launch(store, "keys", {"n": 3})
        flaky = _FailingCommits(store, lambda c: any(
            (e.step_no, e.seq) == (2, 0) for e in c.effects))
        errors = []
        outcome = self.execute(flaky, run.id, reconnect=lambda e: errors.append(e) or True)
        assert outcome == Outcome.SUCCEEDED  # in the same call: no lease ran out
        assert [type(e) for e in errors] == [ConnectionError]
        done = store.load(run.id).run
        assert done.output == {"ids": [1, 2, 3, 4]}
        assert done.crash_count == 0 and done.lease_owner is None  # not counted as a crash
        key = idempotency_key(run.id, 1, 2, 0)
        assert WORLD.target.keys().count(key) == 2  # re-sent under its key...
        assert len(WORLD.target.work) == 4  # ...and done once

    def test_a_cancel_while_its_worker_waited_for_the_store_still_logs_the_cut_off_call(
            self, store, clock):
        # Chaos (PostgreSQL CI, seed 20261): a database restart failed the commit of an
        # idempotent call's outcome; the worker released the run once the store answered,
        # so its claim back was no crash's and honoured the cancel found there at once: the
        # write at the target was never logged.
        run = self.launch(store, "keys", {"n": 3})
        flaky = _FailingCommits(store, lambda c: any(
            (e.step_no, e.seq) == (2, 0) for e in c.effects))

        def cancelled_during_the_outage(error):
            control.cancel(store, run.id, actor="op")
            return True

        assert self.execute(flaky, run.id, reconnect=cancelled_during_the_outage) == \
            Outcome.CANCELLED
        key = idempotency_key(run.id, 1, 2, 0)
        assert WORLD.target.keys().count(key) == 2  # re-sent under its key, nothing new
        assert len(WORLD.target.work) == 2
        calls = [e for e in store.history(run.id).effects if e.kind == r.CALL]
        assert [(e.key, e.status) for e in calls][-1] == (key, r.DONE)
        assert store.load(run.id).run.crash_count == 0  # still not counted as a crash

    def test_a_run_taken_over_while_its_worker_waited_for_the_store_is_fenced(self, store,
                                                                              clock):
        run = self.launch(store, "keys", {"n": 3})
        flaky = _FailingCommits(store, lambda c: any(
            (e.step_no, e.seq) == (2, 0) for e in c.effects))

        def outage_longer_than_the_lease(error):
            clock.advance(LEASE + 1)
            assert store.claim(run.id, "w2", LEASE, time.time()) is not None
            return True

        assert self.execute(flaky, run.id, reconnect=outage_longer_than_the_lease) == \
            Outcome.FENCED
        assert store.load(run.id).run.lease_owner == "w2"  # the release changed nothing
        assert self.execute(store, run.id, worker("w2")) == Outcome.NOT_CLAIMED  # w2 holds it

    def test_a_store_that_answers_but_keeps_failing_is_left_to_the_crash_guard(self, store,
                                                                              clock):
        run = self.launch(store, "keys", {"n": 3})
        flaky = _FailingCommits(store, lambda c: bool(c.effects), times=None)
        errors = []
        outcome = self.execute(flaky, run.id, reconnect=lambda e: errors.append(e) or True)
        assert outcome == Outcome.ABANDONED
        assert len(errors) == MAX_RECONNECTS  # not a hot loop of claims and replays
        assert store.load(run.id).run.lease_owner is not None  # left as a crash leaves it

    def test_a_database_that_fails_again_and_again_while_the_run_goes_on_is_reconnected_to(
            self, store, clock):
        # A flapping network, or failovers one after another: more faults in one slice
        # than MAX_RECONNECTS, each after the run got further. The run waits for its lease
        # after none of them (CI's terminated-connections test, with more faults).
        steps = MAX_RECONNECTS + 3
        run = self.launch(store, "keys", {"n": steps})
        failed_in: set[int] = set()

        def first_effect_of_a_step(commit):
            new = {e.step_no for e in commit.effects if e.seq == 0} - failed_in
            failed_in.update(new)
            return bool(new)

        flaky = _FailingCommits(store, first_effect_of_a_step, times=None)
        errors = []
        outcome = self.execute(flaky, run.id, reconnect=lambda e: errors.append(e) or True)
        assert outcome == Outcome.SUCCEEDED  # in the same call: no lease ran out
        assert len(errors) == steps > MAX_RECONNECTS
        done = store.load(run.id).run
        assert done.crash_count == 0 and done.lease_owner is None
        assert len(WORLD.target.work) == steps + 1  # each record once (two in step 2)

    def _in_doubt(self, store, clock):
        run = self.launch(store, "in_doubt")
        crash_at("after_effect_before_log")
        self.crash(store, run.id, clock)
        assert WORLD.calls["send_email"] == 1
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        return run

    def test_an_in_doubt_non_idempotent_call_needs_an_operator(self, store, clock):
        run = self._in_doubt(store, clock)
        stuck = store.load(run.id).run
        assert stuck.status == r.NEEDS_ATTENTION
        attention = stuck.attention
        assert attention["kind"] == "in_doubt"
        assert attention["tool"] == "tests.send_email"
        assert attention["key"] == idempotency_key(run.id, 1, 1, 0)
        assert (attention["step_no"], attention["seq"]) == (1, 0)
        assert WORLD.calls["send_email"] == 1  # never silently repeated
        before = store.load(run.id).run
        with pytest.raises(InvalidTransitionError):
            control.resume(store, run.id, actor="op")
        assert store.load(run.id).run == before

    def test_resolving_in_doubt_as_done_gives_the_step_the_result(self, store, clock):
        run = self._in_doubt(store, clock)
        resolved = control.resolve_effect(store, run.id, seq=0, resolution="done", actor="op",
                                          result={"sent_to": "by hand"})
        assert resolved.status == r.QUEUED
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output["sent"] == {"sent_to": "by hand"}
        assert WORLD.calls["send_email"] == 1

    def test_resolving_in_doubt_as_retry_calls_again_once_with_the_same_key(self, store, clock):
        run = self._in_doubt(store, clock)
        key = idempotency_key(run.id, 1, 1, 0)
        control.resolve_effect(store, run.id, seq=0, resolution="retry", actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert WORLD.calls["send_email"] == 2
        assert store.load(run.id).run.output["sent"] == {"sent_to": "ada@example.com", "n": 2}
        effect = next(e for e in store.history(run.id).effects if e.tool == "tests.send_email")
        assert (effect.key, effect.status) == (key, r.DONE)

    def test_a_retry_cut_short_by_a_crash_is_in_doubt_again(self, store, clock):
        run = self._in_doubt(store, clock)
        control.resolve_effect(store, run.id, seq=0, resolution="retry", actor="op")
        crash_at("after_effect_before_log")  # the retried call ran; its outcome is lost again
        self.crash(store, run.id, clock)
        assert WORLD.calls["send_email"] == 2
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        assert store.load(run.id).run.attention["kind"] == "in_doubt"
        assert WORLD.calls["send_email"] == 2  # the operator allowed one retry, not two

    def test_a_retry_of_a_failed_call_cut_short_by_a_crash_is_in_doubt(self, store, clock):
        run = self.launch(store, "broken")
        assert self.execute(store, run.id) == Outcome.FAILED
        control.resume(store, run.id, actor="op")
        crash_at("after_effect_before_log", nth=1)
        WORLD.flags["broken"] = False
        self.crash(store, run.id, clock)
        assert WORLD.calls["broken"] == 2
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        assert store.load(run.id).run.attention["tool"] == "tests.broken"
        assert WORLD.calls["broken"] == 2

    @pytest.mark.parametrize("result", [None, {"skipped": True}])
    def test_resolving_in_doubt_as_skip_returns_the_given_result(self, store, clock, result):
        run = self._in_doubt(store, clock)
        control.resolve_effect(store, run.id, seq=0, resolution="skip", actor="op",
                               result=result)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output["sent"] == result
        assert WORLD.calls["send_email"] == 1

    # --- tool errors ---------------------------------------------------------------------------
    def test_a_tool_is_retried_by_its_policy(self, store):
        WORLD.flags["flaky_failures"] = 2
        run = self.launch(store, "flaky")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"value": "v"}
        assert WORLD.calls["flaky"] == 3
        effect = next(e for e in store.history(run.id).effects if e.tool == "tests.flaky")
        assert (effect.status, effect.attempts) == (r.DONE, 3)

    def test_a_tool_that_keeps_failing_raises_tool_failed_error_in_the_step(self, store):
        run = self.launch(store, "broken", {"catch": True})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"caught": "ValueError", "attempts": 1,
                                                 "tool": "tests.broken"}
        effect = next(e for e in store.history(run.id).effects if e.tool == "tests.broken")
        assert effect.status == r.ERROR
        assert effect.error["type"] == "ValueError" and "'x'" in effect.error["message"]

    def test_a_logged_tool_error_is_replayed_not_retried(self, store, clock):
        run = self.launch(store, "broken", {"catch": True})
        WORLD.crash_plan["after_caught"] = 2
        self.crash(store, run.id, clock)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert WORLD.calls["broken"] == 1
        assert store.load(run.id).run.output["caught"] == "ValueError"

    def test_an_uncaught_tool_failure_fails_the_run_and_keeps_the_checkpoint(self, store,
                                                                             read_events):
        run = self.launch(store, "broken")
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id)
        assert failed.run.status == r.FAILED
        assert failed.run.error["type"] == "ToolFailedError"
        assert "tests.broken" in failed.run.error["message"]
        assert failed.run.lease_owner is None
        assert failed.checkpoint.step_no == 1 and failed.run.step_no == 1
        assert self.statuses(read_events(run.id))[-1] == r.FAILED

    def test_resuming_a_failed_run_retries_it(self, store):
        run = self.launch(store, "broken")
        assert self.execute(store, run.id) == Outcome.FAILED
        WORLD.flags["broken"] = False
        assert control.resume(store, run.id, actor="op").status == r.QUEUED
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"value": "x"}
        assert WORLD.calls["broken"] == 2
        assert WORLD.args.count(("echo", "before broken")) == 1  # replayed, not repeated
        assert store.load(run.id).run.error is None

    # --- serialisation and failures outside a step ------------------------------------------------
    @pytest.mark.parametrize("mode,error_type", [("missing_input", "KeyError"),
                                                 ("unserialisable", "StateNotSerializableError")])
    def test_an_agent_whose_start_fails_fails_the_run(self, store, mode, error_type):
        run = self.launch(store, "bad_start", {"mode": mode})
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id)
        assert (failed.run.status, failed.run.lease_owner) == (r.FAILED, None)
        assert failed.run.error["type"] == error_type
        assert failed.checkpoint is None
        assert run.id not in store.due_runs(time.time() + 3600)

    @pytest.mark.parametrize("kind,type_name", [("set", "set"), ("datetime", "datetime")])
    def test_an_unserialisable_state_fails_the_run_naming_the_key(self, store, kind, type_name):
        run = self.launch(store, "bad_state", {"kind": kind})
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id)
        assert failed.run.error["type"] == "StateNotSerializableError"
        assert failed.run.error["path"] == "data.items[0].tags"
        assert "data.items[0].tags" in failed.run.error["message"]
        assert type_name in failed.run.error["message"]
        assert failed.checkpoint.step_no == 1
        assert decode_state(failed.checkpoint.blob, failed.checkpoint.codec)["i"] == 1
        assert self.checkpoint_steps(store, run.id) == [0, 1]

    def test_an_unserialisable_output_fails_the_run(self, store):
        run = self.launch(store, "bad_output")
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id).run
        assert (failed.error["type"], failed.error["path"]) == ("StateNotSerializableError",
                                                                "output.tags")
        assert failed.output is None

    def test_a_step_returning_neither_state_nor_done_fails_the_run(self, store):
        run = self.launch(store, "bad_return")
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id).run
        assert failed.error["type"] == "TypeError"
        assert "Done" in failed.error["message"] and "list" in failed.error["message"]

    def test_a_run_whose_agent_is_gone_needs_attention(self, store):
        run = self.launch(store, "hello", {"name": "Ada"})
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.NEEDS_ATTENTION
        stuck = store.load(run.id).run
        assert stuck.attention["kind"] == "unknown_agent"
        assert "hello" in stuck.attention["message"]
        assert stuck.lease_owner is None
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED

    # --- 7. pause and cancel ---------------------------------------------------------------------
    def _start_slow(self, store):
        run = self.launch(store, "slow_steps")
        future = self.in_thread(lambda: self.execute(store, run.id))
        assert WORLD.started.wait(5), "the slow tool never started"
        return run, future

    def test_pause_while_a_tool_runs_takes_effect_at_the_next_effect_boundary(self, store):
        run, future = self._start_slow(store)
        control.pause(store, run.id, actor="op", reason="lunch")
        requested = store.load(run.id).run
        assert (requested.status, requested.control) == (r.RUNNING, r.PAUSE)
        WORLD.release.set()
        assert future.result(timeout=5) == Outcome.PAUSED
        paused = store.load(run.id).run
        assert (paused.status, paused.control, paused.lease_owner) == (r.PAUSED, None, None)
        assert WORLD.calls["echo"] == 0  # stopped before the next call
        assert self.execute(store, run.id) == Outcome.NOT_CLAIMED
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == [1, 2, 3]
        assert (WORLD.calls["slow_echo"], WORLD.calls["echo"]) == (1, 3)
        # the same output as a run that was never interrupted
        plain = self.launch(store, "slow_steps")
        assert self.execute(store, plain.id) == Outcome.SUCCEEDED
        assert store.load(plain.id).run.output == store.load(run.id).run.output

    def test_a_tool_can_pause_its_own_run(self, store, read_events):
        run = self.launch(store, "self_pauser")
        assert self.execute(store, run.id) == Outcome.PAUSED
        assert WORLD.calls["echo"] == 0
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"second": "second"}
        assert WORLD.calls["pause_me"] == 1
        events = read_events(run.id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        assert self.logs(events) == ["between the calls"]  # once, though the step ran twice
        assert [d["message"] for _, k, d in events if k == "progress"] == ["half way"]

    def test_cancel_while_a_tool_runs_takes_effect_at_the_next_effect_boundary(self, store):
        run, future = self._start_slow(store)
        control.cancel(store, run.id, actor="op")
        WORLD.release.set()
        assert future.result(timeout=5) == Outcome.CANCELLED
        cancelled = store.load(run.id).run
        assert (cancelled.status, cancelled.lease_owner) == (r.CANCELLED, None)
        assert WORLD.calls["echo"] == 0
        with pytest.raises(InvalidTransitionError):
            control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.NOT_CLAIMED

    def test_resuming_before_a_pause_took_effect_withdraws_it(self, store):
        run, future = self._start_slow(store)
        control.pause(store, run.id, actor="op")
        assert control.resume(store, run.id, actor="op").control is None
        WORLD.release.set()
        assert future.result(timeout=5) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == [1, 2, 3]

    def test_pausing_a_sleeping_run_keeps_its_timer(self, store, clock):
        run = self.launch(store, "sleeper", {"seconds": 30})
        self.execute(store, run.id)
        wake_at = store.load(run.id).run.wake_at
        assert control.pause(store, run.id, actor="op").status == r.PAUSED
        clock.advance(10)
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.WAITING  # 20 s still to go
        assert store.load(run.id).run.wake_at == pytest.approx(wake_at, abs=1e-3)
        clock.advance(21)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert WORLD.calls["echo"] == 2

    @pytest.mark.parametrize("act, status", [("cancel", r.CANCELLED), ("pause", r.PAUSED)])
    def test_a_pause_or_cancel_landing_as_the_run_goes_to_sleep_is_carried_out(
            self, store, clock, act, status):
        # The operator saw the run running (so the request waits for its next boundary)
        # and the worker, not having seen it, committed its wait: the request must not
        # sleep with the run until the timer fires.
        run = self.launch(store, "sleeper", {"seconds": 3600})
        late = _ControlBeforeWait(store, act)
        assert self.execute(late, run.id) == status
        after = store.load(run.id).run
        assert (after.status, after.control, after.lease_owner) == (status, None, None)
        if act == "pause":
            control.resume(store, run.id, actor="op")
            assert self.execute(store, run.id) == Outcome.WAITING  # the timer kept

    def test_pausing_a_run_waiting_for_input_keeps_its_question(self, store):
        run = self.launch(store, "asker")
        self.execute(store, run.id)
        control.pause(store, run.id, actor="op")
        with pytest.raises(InvalidTransitionError):
            control.provide_input(store, run.id, value={"colour": "red"}, actor="ada")
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.WAITING
        assert store.load(run.id).run.attention["prompt"] == "Which colour?"
        control.provide_input(store, run.id, value={"colour": "red"}, actor="ada")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output["answer"] == {"colour": "red"}

    def test_pausing_a_queued_run_keeps_it_from_workers_until_resumed(self, store):
        run = self.launch(store, "steps", {"n": 2})
        assert control.pause(store, run.id, actor="op").status == r.PAUSED
        assert run.id not in store.due_runs(time.time())
        assert self.execute(store, run.id) == Outcome.NOT_CLAIMED
        control.resume(store, run.id, actor="op")
        assert run.id in store.due_runs(time.time())
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"values": [10, 20]}

    def test_cancelling_a_queued_run(self, store, read_events):
        run = self.launch(store, "steps", {"n": 2})
        assert control.cancel(store, run.id, actor="op").status == r.CANCELLED
        assert self.execute(store, run.id) == Outcome.NOT_CLAIMED
        assert WORLD.calls["bump"] == 0
        assert self.statuses(read_events(run.id)) == [r.QUEUED, r.CANCELLED]

    # --- rollback and edits -------------------------------------------------------------------
    def test_rollback_forks_a_new_branch_and_supersedes_later_effects(self, store, read_events):
        run = self.launch(store, "keys", {"n": 3})
        self.execute(store, run.id)
        step1 = next(c for c in store.history(run.id).checkpoints if c.step_no == 1)
        rolled = control.rollback(store, run.id, checkpoint=step1.number, actor="op",
                                  reason="bad data")
        assert (rolled.status, rolled.branch, rolled.step_no) == (r.QUEUED, 2, 1)
        assert rolled.output is None
        old = [e for e in store.history(run.id).effects if e.branch == 1]
        assert [(e.step_no, e.superseded) for e in old] == [
            (1, False), (2, True), (2, True), (3, True)]
        assert store.load(run.id).checkpoint.branch == 2
        assert store.load(run.id).effects == []  # nothing of the old branch is replayed
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert WORLD.calls["post_record"] == 4 + 3
        assert self.checkpoint_steps(store, run.id, branch=2) == [1, 2]
        assert "rollback" in {kind for _, kind, _ in read_events(run.id)}

    def test_rollback_preview_lists_the_effects_it_undoes(self, store):
        run = self.launch(store, "idem_first")
        self.execute(store, run.id)
        start = store.history(run.id).checkpoints[0]
        preview = control.rollback_preview(store, run.id, checkpoint=start.number)
        assert preview["checkpoint"] == start.number and preview["step"] == 0
        assert [e["tool"] for e in preview["effects"]] == ["tests.post_record", "tests.echo"]
        assert [e["idempotent"] for e in preview["effects"]] == [True, False]
        assert preview["by_tool"] == [
            {"tool": "tests.post_record", "calls": 1, "not_idempotent": 0, "reached": 0},
            {"tool": "tests.echo", "calls": 1, "not_idempotent": 1, "reached": 1}]
        assert (preview["not_idempotent"], preview["reached"]) == (1, 1)
        assert preview["steps_undone"] == 1 and preview["stays_paused"] is False
        assert preview["effects"][1]["key"] == idempotency_key(run.id, 1, 1, 1)
        with pytest.raises(CheckpointNotFoundError):
            control.rollback_preview(store, run.id, checkpoint=999)

    def test_a_rollback_leaves_a_paused_run_paused_unless_told_to_resume(self, store):
        run = self.launch(store, "keys", {"n": 3})
        self.execute(store, run.id)
        step1 = next(c for c in store.history(run.id).checkpoints if c.step_no == 1)
        held = control.rollback(store, run.id, checkpoint=step1.number, actor="op", resume=False)
        assert (held.status, held.branch) == (r.PAUSED, 2)
        again = control.rollback(store, run.id, checkpoint=step1.number, actor="op")
        assert (again.status, again.branch) == (r.PAUSED, 3)  # it was paused: it stays so
        assert run.id not in store.due_runs(time.time())
        assert control.rollback(store, run.id, checkpoint=step1.number, actor="op",
                                resume=True).status == r.QUEUED
        assert self.execute(store, run.id) == Outcome.SUCCEEDED

    def test_an_action_returns_the_run_as_its_commit_left_it(self, store):
        run = self.launch(store, "keys", {"n": 1})
        paused = control.pause(store, run.id, actor="op")
        assert paused == store.get(run.id) == store.load(run.id).run
        assert (paused.status, paused.epoch) == (r.PAUSED, run.epoch + 1)
        with pytest.raises(RunNotFoundError):
            store.get("missing")

    def test_a_history_query_reads_only_the_parts_it_names(self, store):
        run = self.launch(store, "keys", {"n": 3})
        self.execute(store, run.id)
        by_step = {c.step_no: c for c in store.history(run.id).checkpoints}
        control.rollback(store, run.id, checkpoint=by_step[2].number, actor="op")
        self.execute(store, run.id)
        full = store.history(run.id)
        fork = next(c for c in full.checkpoints if c.parent_number is not None)
        forks = store.history(run.id, r.HistoryQuery(forks=True))
        assert forks.checkpoints == sorted([by_step[2], fork], key=lambda c: c.number)
        assert forks.effects == []
        target = store.history(run.id, r.HistoryQuery(checkpoint=by_step[1].number))
        assert target.checkpoints == [by_step[1]]
        in_order = sorted(full.effects, key=lambda e: e.position)
        supersede = r.Supersede(after_step=1, keep_branches=(1, 3))
        marked = store.history(run.id, r.HistoryQuery(superseded_by=supersede)).effects
        assert marked == [e for e in in_order if not e.superseded
                          and (e.step_no > 1 or e.branch not in (1, 3))] != []
        step = store.history(run.id, r.HistoryQuery(step=(2, 3))).effects
        assert step == [e for e in in_order if (e.branch, e.step_no) == (2, 3)] != []
        assert store.history(run.id, r.HistoryQuery()) == r.History([], [])
        with pytest.raises(RunNotFoundError):
            store.history("missing", r.HistoryQuery(forks=True))

    def _yield_after_one_step(self, store, agent="resumable"):
        run = self.launch(store, agent)
        assert self.execute(store, run.id, worker(slice_seconds=0)) == Outcome.YIELDED
        return run

    def test_edit_state_forks_a_paused_branch_that_resume_uses(self, store):
        run = self._yield_after_one_step(store)
        control.pause(store, run.id, actor="op")
        edited = {"i": 2, "resumed": 0, "out": ["edited"]}
        after = control.edit_state(store, run.id, state=edited, actor="op", reason="fix")
        assert (after.status, after.branch, after.step_no) == (r.PAUSED, 2, 1)
        latest = store.load(run.id).checkpoint
        assert (latest.branch, latest.reason) == (2, "edit")
        assert decode_state(latest.blob, latest.codec) == edited
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"out": ["edited", "v1:3", "v1:4"],
                                                 "resumed": 1}

    def test_patch_state_applies_a_json_patch_to_the_latest_state_and_audits_the_patch(
            self, store, read_audit):
        run = self._yield_after_one_step(store)
        control.pause(store, run.id, actor="op")
        latest = store.load(run.id).checkpoint
        before = decode_state(latest.blob, latest.codec)
        for bad in ([{"op": "replace", "path": "/nope/x", "value": 1}],
                    [{"op": "replace", "path": "", "value": [1]}], [{"op": "what"}], "x"):
            with pytest.raises(StatePatchError):
                control.patch_state(store, run.id, patch=bad, actor="op")
        with pytest.raises(StaleEditError):
            control.patch_state(store, run.id, patch=[{"op": "remove", "path": "/out"}],
                                actor="op", checkpoint=latest.number + 5)
        assert (store.get(run.id).branch, len(read_audit(run.id))) == (1, 1)  # the pause only
        patch = [{"op": "replace", "path": "/i", "value": 2},
                 {"op": "add", "path": "/out/-", "value": "edited"}]
        after = control.patch_state(store, run.id, patch=patch, actor="op", reason="fix",
                                    checkpoint=latest.number)
        assert (after.status, after.branch) == (r.PAUSED, 2)
        edited = store.load(run.id).checkpoint
        assert decode_state(edited.blob, edited.codec) == {
            **before, "i": 2, "out": [*before["out"], "edited"]}
        audit = read_audit(run.id)[-1]
        assert (audit.action, audit.after["paths"], audit.after["patch"]) == (
            "edit_state", ["/i", "/out/-"], patch)

    # --- sleep and input ----------------------------------------------------------------------
    def test_a_long_sleep_frees_the_worker_until_its_timer_is_due(self, store, clock):
        run = self.launch(store, "sleeper", {"seconds": 30})
        started = time.time()
        assert self.execute(store, run.id) == Outcome.WAITING
        waiting = store.load(run.id).run
        assert (waiting.status, waiting.lease_owner) == (r.WAITING, None)
        assert started + 29 < waiting.wake_at < time.time() + 31
        assert waiting.attention["kind"] == "sleep"
        assert run.id not in store.due_runs(time.time())
        assert run.id in store.due_runs(waiting.wake_at + 0.01)
        assert self.execute(store, run.id) == Outcome.NOT_CLAIMED
        clock.advance(31)
        assert run.id in store.due_runs(time.time())
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"before": "before sleep", "after": "after sleep"}
        assert WORLD.args == [("echo", "before sleep"), ("echo", "after sleep")]

    def test_a_worker_that_dies_just_after_claiming_a_due_timer_leaves_it_due_again(self, store,
                                                                                     clock):
        # SIGKILL between the claim of a due waiting run (it stays `waiting` until the
        # session writes) and its first write: the dead holder's lease must not keep the
        # timer from ever being due again.
        run = self.launch(store, "sleeper", {"seconds": 30})
        assert self.execute(store, run.id) == Outcome.WAITING
        clock.advance(31)
        assert store.claim(run.id, "dead:1", LEASE, time.time()) is not None
        assert store.load(run.id).run.status == r.WAITING
        assert run.id not in store.due_runs(time.time())  # its lease still holds
        clock.advance(LEASE + 1)
        assert run.id in store.due_runs(time.time())
        assert self.execute(store, run.id) == Outcome.SUCCEEDED

    # (status, timer due in seconds or None, lease: "none", "live", "expired" or
    # "unbounded" (an owner without an expiry)) -> claimable; runs/durable/claimable.py
    CLAIMABILITY = [
        ((r.QUEUED, None, "none"), True),
        ((r.QUEUED, None, "live"), False),
        ((r.QUEUED, None, "expired"), True),  # its worker died between claim and first write
        ((r.RUNNING, None, "none"), True),
        ((r.RUNNING, None, "live"), False),
        ((r.RUNNING, None, "expired"), True),
        ((r.RUNNING, None, "unbounded"), True),  # a lease without an end is no live lease
        ((r.WAITING, -1, "none"), True),
        ((r.WAITING, 60, "none"), False),
        ((r.WAITING, None, "none"), False),  # waiting for an answer: no timer
        ((r.WAITING, -1, "live"), False),  # claimed, its session not yet written
        ((r.WAITING, -1, "expired"), True),  # the claimer died before its first write
        ((r.WAITING, 60, "expired"), False),
        ((r.WAITING, None, "expired"), False),
        ((r.PAUSED, None, "none"), False),
        ((r.NEEDS_ATTENTION, None, "none"), False),
        ((r.SUCCEEDED, None, "none"), False),
        ((r.FAILED, None, "none"), False),
        ((r.CANCELLED, None, "none"), False),
    ]

    def test_which_runs_are_claimable_is_one_rule_for_due_runs_and_claim(self, store):
        """The claim rule, case by case: due_runs lists exactly the runs claim takes."""
        now = time.time()
        runs = {}
        for (status, wake_in, lease), _ in self.CLAIMABILITY:
            run = self.launch(store, "steps", {"n": 1})
            epoch = store.claim(run.id, "w1", LEASE, now).run.epoch
            update = r.RunChanges(status=status,
                                  wake_at=None if wake_in is None else now + wake_in)
            if lease == "live":
                update.lease_expires_at = now + 60
            elif lease == "expired":
                update.lease_expires_at = now - 1
            elif lease == "unbounded":
                update.lease_expires_at = None
            store.commit(run.id, epoch, r.Commit(run=update, release=lease == "none"))
            runs[(status, wake_in, lease)] = run.id
        due = set(store.due_runs(now, limit=len(runs) + 1))
        listed = {case: run_id in due for case, run_id in runs.items()}
        taken = {case: store.claim(run_id, "w2", LEASE, now) is not None
                 for case, run_id in runs.items()}
        expected = dict(self.CLAIMABILITY)
        assert listed == expected
        assert taken == expected

    @pytest.mark.parametrize("seconds", [1e12, "soon", True])
    def test_a_sleep_no_timer_can_hold_fails_the_run_with_a_clear_error(self, store, seconds):
        # Before: 1e12 s made a wake time past the year 9999, which the ORM store could
        # not write: the run was left as a crash, again and again.
        run = self.launch(store, "sleeper", {"seconds": seconds})
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id).run
        assert failed.error["type"] in ("ValueError", "TypeError")
        assert "ctx.sleep" in failed.error["message"]

    def test_a_short_sleep_blocks_inline(self, store):
        # Inline: the one claim runs through the sleep (a durable timer would return
        # WAITING and need a second claim), so no timing is asserted.
        run = self.launch(store, "sleeper", {"seconds": 0.3})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.wake_at is None
        assert WORLD.calls["echo"] == 2

    def test_wait_for_input_validates_the_answer_and_continues_with_it(self, store, read_events):
        run = self.launch(store, "asker")
        assert self.execute(store, run.id) == Outcome.WAITING
        waiting = store.load(run.id).run
        assert waiting.status == r.WAITING and waiting.wake_at is None
        assert waiting.attention["kind"] == "input"
        assert waiting.attention["prompt"] == "Which colour?"
        assert waiting.attention["schema"] == ANSWER_SCHEMA
        asked = [d for _, kind, d in read_events(run.id) if kind == "input_requested"]
        assert [d["prompt"] for d in asked] == ["Which colour?"]
        assert run.id not in store.due_runs(time.time() + 10 ** 6)

        count = len(read_events(run.id))
        with pytest.raises(InputValidationError):
            control.provide_input(store, run.id, value={"colour": "green"}, actor="ada")
        assert store.load(run.id).run == waiting
        assert len(read_events(run.id)) == count

        answered = control.provide_input(store, run.id, value={"colour": "red"}, actor="ada")
        assert answered.status == r.QUEUED
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"answer": {"colour": "red"},
                                                 "after": "after answer"}
        assert WORLD.args == [("echo", "before asking"), ("echo", "after answer")]
        with pytest.raises(InvalidTransitionError):
            control.provide_input(store, run.id, value={"colour": "blue"}, actor="ada")

    # --- 5. one owner at a time ------------------------------------------------------------
    def test_an_old_epoch_can_neither_commit_nor_renew(self, store, read_events):
        run = self.launch(store, "steps")
        now = time.time()
        first = store.claim(run.id, "w1", 5, now)
        assert first is not None and first.crashed is False
        assert store.claim(run.id, "w2", 5, now + 1) is None  # the lease is live
        second = store.claim(run.id, "w2", 5, now + 6)
        assert second is not None and second.crashed is True
        assert second.run.epoch == first.run.epoch + 1
        assert second.run.lease_owner == "w2"

        before, events = store.load(run.id).run, read_events(run.id)
        stale = r.Commit(run=r.RunChanges(status=r.SUCCEEDED, output="zombie"),
                         events=[("log", {"message": "zombie"})], release=True)
        with pytest.raises(FencedError):
            store.commit(run.id, first.run.epoch, stale)
        with pytest.raises(FencedError):
            store.renew(run.id, first.run.epoch, now + 100)
        assert store.load(run.id).run == before
        assert read_events(run.id) == events
        store.renew(run.id, second.run.epoch, now + 100)
        assert store.load(run.id).run.lease_expires_at == pytest.approx(now + 100, abs=1e-3)

    def _zombie(self, store, clock, agent):
        """A worker stalls in a slow call past its lease; another worker finishes the run.

        Returns the run and the stalled worker's future; the test releases its call."""
        run = self.launch(store, agent)

        def renewal_fails():
            if threading.current_thread().name.startswith("lease-"):
                raise InjectedFault("the database is unreachable from this worker")

        zombie = self.in_thread(lambda: self.execute(store, run.id, worker("zombie",
                                                                           lease_seconds=1)))
        assert WORLD.started.wait(5)
        faults.arm("lease_renewal", renewal_fails)
        clock.advance(5)
        wait_until(lambda: run.id in store.due_runs(time.time()), what="the lease to expire")
        assert self.execute(store, run.id, worker("w2", lease_seconds=60)) == Outcome.SUCCEEDED
        return run, zombie

    def test_batch_renewals_hold_to_the_epoch_and_the_owner(self, store):
        now = time.time()
        runs = [self.launch(store, "steps", {"n": 1}) for _ in range(4)]
        claims = [store.claim(run.id, "w1", LEASE, now) for run in runs]
        held = [r.LeaseHeld(c.run.id, c.run.epoch, "w1") for c in claims]
        for claim in claims:
            store.commit(claim.run.id, claim.run.epoch,
                         r.Commit(run=r.RunChanges(status=r.RUNNING)))
        control.pause(store, runs[0].id, actor="op")  # a request the renewal reads
        store.commit(runs[1].id, claims[1].run.epoch,
                     r.Commit(run=r.RunChanges(lease_expires_at=now - 1)))
        taken = store.claim(runs[1].id, "w2", LEASE, now)  # claimed again: a new epoch
        store.commit(runs[2].id, claims[2].run.epoch, r.Commit(release=True))  # same epoch
        assert store.renew_leases(held, now + 100) == {runs[0].id: r.PAUSE, runs[3].id: None}
        leases = {run.id: store.get(run.id) for run in runs}
        assert leases[runs[0].id].lease_expires_at == pytest.approx(now + 100, abs=1e-3)
        assert leases[runs[3].id].lease_expires_at == pytest.approx(now + 100, abs=1e-3)
        assert (leases[runs[1].id].lease_owner, leases[runs[1].id].lease_expires_at) == (
            "w2", pytest.approx(taken.run.lease_expires_at, abs=1e-3))  # not w1's renewal
        assert (leases[runs[2].id].lease_owner, leases[runs[2].id].lease_expires_at) == (
            None, None)  # a released run is not leased again
        assert store.renew_leases([], now + 100) == {}
        assert store.renew_leases([r.LeaseHeld(runs[3].id, claims[3].run.epoch, "w9")],
                                  now + 200) == {}  # another owner's name renews nothing

    def test_live_leases_are_those_of_the_prefix_still_alive(self, store):
        now = time.time()
        runs = [self.launch(store, "steps", {"n": 1}) for _ in range(4)]
        owners = ["hostA:10:1", "hostA:11:1", "hostB:10:1", "hostA:12:1"]
        claims = [store.claim(run.id, owner, LEASE, now) for run, owner in zip(runs, owners)]
        store.commit(runs[1].id, claims[1].run.epoch,
                     r.Commit(run=r.RunChanges(lease_expires_at=now - 1)))  # expired
        store.commit(runs[3].id, claims[3].run.epoch,
                     r.Commit(run=r.RunChanges(status=r.SUCCEEDED), release=True))  # ended
        assert store.live_leases("hostA:", now) == [
            r.LeaseHeld(runs[0].id, claims[0].run.epoch, "hostA:10:1")]
        assert store.live_leases("hostA:", now + LEASE + 1) == []  # past the lease
        assert [lease.owner for lease in store.live_leases("hostB:", now)] == ["hostB:10:1"]
        # what the sweep does with a dead holder's lease: renewed to expire now
        assert store.renew_leases(store.live_leases("hostA:", now), now) == {runs[0].id: None}
        assert runs[0].id in store.due_runs(now + 0.01)

    def test_due_runs_leaves_out_the_runs_a_worker_holds(self, store):
        first, second = (self.launch(store, "steps", {"n": 1}) for _ in range(2))
        assert set(store.due_runs(time.time())) == {first.id, second.id}
        assert store.due_runs(time.time(), exclude=[first.id]) == [second.id]
        assert store.due_runs(time.time(), exclude=[first.id, second.id]) == []

    def test_a_zombie_worker_that_lost_its_lease_cannot_write(self, store, clock, read_events):
        run, zombie = self._zombie(store, clock, "slow")
        finished, events, history = (store.load(run.id).run, read_events(run.id),
                                     store.history(run.id))
        WORLD.release.set()  # the zombie's tool call returns; it tries to log it
        assert zombie.result(timeout=5) == Outcome.FENCED
        assert store.load(run.id).run == finished
        assert read_events(run.id) == events
        assert store.history(run.id).effects == history.effects
        key = idempotency_key(run.id, 1, 1, 0)
        assert WORLD.target.keys().count(key) == 2 and len(WORLD.target.work) == 1
        assert WORLD.calls["echo"] == 1  # the zombie never reached its next call

    def test_a_zombie_that_swallows_its_fenced_error_calls_no_more_tools(self, store, clock,
                                                                        read_events):
        run, zombie = self._zombie(store, clock, "careless_slow")
        finished, events = store.load(run.id).run, read_events(run.id)
        WORLD.release.set()
        assert zombie.result(timeout=5) == Outcome.FENCED
        assert WORLD.calls["post_record"] == 1  # only the live worker's
        assert store.load(run.id).run == finished
        assert read_events(run.id) == events

    def test_a_run_that_keeps_crashing_in_one_step_needs_attention(self, store, clock):
        run = self.launch(store, "crasher")
        for _ in range(3):
            self.crash(store, run.id, clock)
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        stuck = store.load(run.id).run
        assert stuck.attention["kind"] == "crash_loop"
        assert stuck.lease_owner is None
        assert WORLD.calls["crash_tool"] == 3

    # --- 8. versions and on_resume ---------------------------------------------------------------
    def test_a_run_whose_history_diverges_on_new_code_waits_for_its_version(self, store,
                                                                                read_events):
        run = self._yield_after_one_step(store)
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.VERSION_WAIT
        stuck = store.load(run.id).run
        assert (stuck.status, stuck.agent_version, stuck.lease_owner) == (r.QUEUED, "1", None)
        assert stuck.attention["kind"] == "version"
        assert stuck.attention["message"] == (
            "waiting for a worker with version 1: diverges at step 1, call 1 "
            "(tests.echo args differ)")
        assert stuck.version_refused == stuck.attention["refused_by"] != stuck.code_fingerprint
        assert WORLD.args == [("echo", "v1:1")]  # the replay called nothing
        # its own code takes it back and finishes it
        assert self.execute(store, run.id, registry=REG) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output["out"] == ["v1:1", "v1:2", "v1:3", "v1:4"]

    def test_an_operator_upgrade_continues_a_diverging_run_on_the_new_code(self, store):
        run = self._yield_after_one_step(store)
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.VERSION_WAIT
        with pytest.raises(InvalidTransitionError):
            control.resume(store, run.id, actor="op")
        upgraded = upgrade.upgrade(store, run.id, actor="op", registry=REG_V2)
        assert (upgraded.status, upgraded.branch, upgraded.agent_version) == (r.QUEUED, 2, "2")
        assert upgraded.attention is None and upgraded.version_refused is None
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.SUCCEEDED
        output = store.load(run.id).run.output
        assert output["out"] == ["v1:1", "v2:2", "v2:3", "v2:4"]

    def test_a_run_that_never_started_moves_to_the_new_code_by_itself(self, store):
        run = self.launch(store, "resumable")
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.SUCCEEDED
        done = store.load(run.id).run
        assert (done.agent_version, done.output["out"]) == ("2", ["v2:1", "v2:2", "v2:3",
                                                                  "v2:4"])

    def test_on_resume_is_not_called_after_a_time_slice(self, store):
        run = self.launch(store, "resumable")
        outcomes = [self.execute(store, run.id, worker(slice_seconds=0)) for _ in range(4)]
        assert outcomes == [Outcome.YIELDED] * 3 + [Outcome.SUCCEEDED]
        assert WORLD.resumes == []
        assert store.load(run.id).run.output["resumed"] == 0

    def test_on_resume_is_called_after_a_crash_with_the_time_away(self, store, clock,
                                                                   read_events):
        run = self.launch(store, "resumable")
        WORLD.crash_plan["after_echo"] = 2
        self.crash(store, run.id, clock)  # the clock moves on by the lease and a second
        clock.advance(10)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        [resume] = WORLD.resumes
        assert LEASE + 11 <= resume["suspended_for"] < LEASE + 21
        assert resume["i"] == 0  # checkpoint_every=10: the start checkpoint
        assert store.load(run.id).run.output == {"out": ["v1:1", "v1:2", "v1:3", "v1:4"],
                                                 "resumed": 1}
        # on_resume is live, not replayed: its log is written though steps 1-2 replay
        assert [m for m in self.logs(read_events(run.id)) if m.startswith("back")] == [
            f"back after {resume['suspended_for']:.0f} s"]

    def test_an_on_resume_that_raises_fails_the_run(self, store, clock):
        run = self.launch(store, "resumable")
        WORLD.crash_plan["after_echo"] = 2
        self.crash(store, run.id, clock)
        WORLD.flags["on_resume_fails"] = True
        assert self.execute(store, run.id) == Outcome.FAILED
        failed = store.load(run.id).run
        assert (failed.status, failed.lease_owner) == (r.FAILED, None)
        assert failed.error["type"] == "RuntimeError"
        assert "outside world" in failed.error["message"]

    def test_on_resume_is_called_after_a_pause_with_the_time_away(self, store, clock):
        run = self.launch(store, "resumable")
        WORLD.flags["pause_in_step_2"] = True
        assert self.execute(store, run.id) == Outcome.PAUSED
        assert WORLD.resumes == []
        paused = store.load(run.id)
        assert (paused.checkpoint.step_no, paused.checkpoint.reason) == (2, "pause")
        clock.advance(60)
        control.resume(store, run.id, actor="op")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        [resume] = WORLD.resumes
        assert 60 <= resume["suspended_for"] < 70
        assert resume["i"] == 2
        output = store.load(run.id).run.output
        assert output == {"out": ["v1:1", "v1:2", "v1:3", "v1:4"], "resumed": 1}

    # --- 6. fair sharing and shutdown ---------------------------------------------------------------
    def test_a_time_slice_yields_with_a_checkpoint_and_runs_continue(self, store):
        run = self.launch(store, "steps_every10", {"n": 3})
        assert self.execute(store, run.id, worker(slice_seconds=0)) == Outcome.YIELDED
        yielded = store.load(run.id)
        assert (yielded.run.status, yielded.run.lease_owner) == (r.QUEUED, None)
        assert (yielded.checkpoint.step_no, yielded.checkpoint.reason) == (1, "slice")
        assert run.id in store.due_runs(time.time())
        outcomes = [self.execute(store, run.id, worker(slice_seconds=0)) for _ in range(2)]
        assert outcomes == [Outcome.YIELDED, Outcome.SUCCEEDED]
        assert store.load(run.id).run.output == {"values": [10, 20, 30]}
        assert WORLD.calls["bump"] == 3

    def test_shutdown_hands_the_run_off_at_once(self, store):
        run = self.launch(store, "stopper")
        outcome = self.execute(store, run.id, worker(lease_seconds=60),
                               stop_event=WORLD.stop_event)
        assert outcome == Outcome.HANDED_OFF
        handed = store.load(run.id).run
        assert (handed.status, handed.lease_owner) == (r.QUEUED, None)
        assert run.id in store.due_runs(time.time())  # no waiting for the 60 s lease
        assert self.execute(store, run.id, worker("w2")) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"first": "shutdown requested",
                                                 "second": "second"}
        assert (WORLD.calls["request_shutdown"], WORLD.calls["echo"]) == (1, 1)

    # --- bad input and wrong statuses ------------------------------------------------------------
    def test_launching_an_unknown_agent_creates_nothing(self, store):
        with pytest.raises(AgentNotFoundError):
            self.launch(store, "no_such_agent")
        assert store.due_runs(time.time()) == []

    @pytest.mark.parametrize("inputs,field", [
        ({"name": ""}, "name"), ({"times": 3}, ""), ({"name": "x", "times": "2"}, "times")])
    def test_launching_with_inputs_failing_the_schema_creates_nothing(self, store, inputs, field):
        with pytest.raises(InputValidationError) as caught:
            self.launch(store, "schema", inputs)
        assert caught.value.field == field
        assert store.due_runs(time.time()) == []

    @pytest.mark.parametrize("inputs", [["a"], "name=x", 3])
    def test_launching_with_inputs_that_are_not_an_object_creates_nothing(self, store, inputs):
        with pytest.raises(InputValidationError):
            control.launch(store, agent="schema", inputs=inputs, registry=REG)
        assert store.due_runs(time.time()) == []

    def test_launching_with_a_nul_character_in_the_inputs_creates_nothing(self, store):
        # PostgreSQL's jsonb refuses U+0000: the launch says so, by key, up front.
        with pytest.raises(StateNotSerializableError) as caught:
            control.launch(store, agent="hello", inputs={"name": "A\x00"}, registry=REG)
        assert caught.value.path == "inputs.name"
        assert store.due_runs(time.time()) == []

    def test_a_nul_character_in_a_log_line_is_replaced_not_fatal(self, store, read_events):
        run = self.launch(store, "nul_talk")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        logs = [data["message"] for _, kind, data in read_events(run.id) if kind == "log"]
        assert logs == ["before\ufffdafter"]
        assert store.load(run.id).run.progress_message == "half\ufffdway"

    def test_launch_applies_schema_defaults(self, store):
        run = self.launch(store, "schema", {"name": "Ada"})
        assert run.inputs == {"name": "Ada", "times": 2}
        assert store.load(run.id).run.inputs == {"name": "Ada", "times": 2}
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"names": ["Ada", "Ada"]}

    def test_an_unknown_run_id_is_reported(self, store):
        with pytest.raises(RunNotFoundError):
            store.load("missing")
        with pytest.raises(RunNotFoundError):
            store.history("missing")
        for action in (control.pause, control.cancel):
            with pytest.raises(RunNotFoundError):
                action(store, "missing", actor="op")
        with pytest.raises(RunNotFoundError):
            control.resume(store, "missing", actor="op")
        with pytest.raises(RunNotFoundError):
            control.rollback(store, "missing", checkpoint=1, actor="op")
        with pytest.raises(RunNotFoundError):
            control.rollback_preview(store, "missing", checkpoint=1)
        assert self.execute(store, "missing") == Outcome.NOT_CLAIMED

    def test_operator_actions_on_wrong_statuses_change_nothing(self, store, read_events,
                                                               read_audit):
        done = self.launch(store, "steps", {"n": 1})
        self.execute(store, done.id)
        refused = [
            lambda: control.pause(store, done.id, actor="op"),
            lambda: control.cancel(store, done.id, actor="op"),
            lambda: control.resume(store, done.id, actor="op"),
            lambda: upgrade.upgrade(store, done.id, actor="op", registry=REG),
            lambda: control.resolve_effect(store, done.id, seq=0, resolution="done",
                                           actor="op"),
            lambda: control.provide_input(store, done.id, value=1, actor="op"),
        ]
        self._assert_refused(store, done.id, refused, InvalidTransitionError, read_events,
                             read_audit)
        self._assert_refused(store, done.id, [
            lambda: control.rollback(store, done.id, checkpoint=999, actor="op")],
            CheckpointNotFoundError, read_events, read_audit)
        self._assert_refused(store, done.id, [
            lambda: control.resolve_effect(store, done.id, seq=0, resolution="maybe",
                                           actor="op"),
            lambda: control.edit_state(store, done.id, state=["not", "a", "dict"], actor="op")],
            InputValidationError, read_events, read_audit)

        queued = self.launch(store, "steps", {"n": 1})
        self._assert_refused(store, queued.id, [
            lambda: control.resume(store, queued.id, actor="op"),
            lambda: control.edit_state(store, queued.id, state={}, actor="op")],  # no checkpoint
            InvalidTransitionError, read_events, read_audit)
        store.claim(queued.id, "w1", 60, time.time())  # a worker holds it
        self._assert_refused(store, queued.id, [
            lambda: control.edit_state(store, queued.id, state={"i": 0}, actor="op")],
            InvalidTransitionError, read_events, read_audit)

    @staticmethod
    def _assert_refused(store, run_id, actions, error, read_events, read_audit):
        for action in actions:
            run, events, audit = (store.load(run_id).run, read_events(run_id),
                                  read_audit(run_id))
            with pytest.raises(error):
                action()
            assert store.load(run_id).run == run
            assert read_events(run_id) == events
            assert len(read_audit(run_id)) == len(audit)

    def test_every_operator_action_writes_one_audit_record(self, store, read_audit, read_events):
        run = self._yield_after_one_step(store)
        first = store.history(run.id).checkpoints[0]
        actions = [
            ("pause", lambda: control.pause(store, run.id, actor="ann", reason="r1"),
             r.QUEUED, r.PAUSED),
            ("edit_state", lambda: control.edit_state(
                store, run.id, state={"i": 1, "resumed": 0, "out": ["e"]}, actor="bob",
                reason="r2"), r.PAUSED, r.PAUSED),
            ("resume", lambda: control.resume(store, run.id, actor="cy", reason="r3"),
             r.PAUSED, r.QUEUED),
            ("rollback", lambda: control.rollback(store, run.id, checkpoint=first.number,
                                                  actor="dee", reason="r4"), r.QUEUED, r.QUEUED),
            ("cancel", lambda: control.cancel(store, run.id, actor="eve", reason="r5"),
             r.QUEUED, r.CANCELLED),
        ]
        for number, (action, act, before, after) in enumerate(actions, start=1):
            act()
            audit = read_audit(run.id)
            assert len(audit) == number
            entry = audit[-1]
            assert entry.action == action
            assert entry.actor == ["ann", "bob", "cy", "dee", "eve"][number - 1]
            assert entry.reason == f"r{number}"
            assert (entry.before["status"], entry.after["status"]) == (before, after)
        audited = [d["action"] for _, kind, d in read_events(run.id) if kind == "audit"]
        assert audited == [a[0] for a in actions]
        branches = [(e.before["branch"], e.after["branch"]) for e in read_audit(run.id)]
        assert branches == [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)]

    def test_answering_and_resolving_are_audited(self, store, clock, read_audit):
        asking = self.launch(store, "asker")
        self.execute(store, asking.id)
        control.provide_input(store, asking.id, value={"colour": "blue"}, actor="ada")
        [entry] = read_audit(asking.id)
        assert (entry.actor, entry.before["status"], entry.after["status"]) == (
            "ada", r.WAITING, r.QUEUED)
        doubtful = self._in_doubt(store, clock)
        control.resolve_effect(store, doubtful.id, seq=0, resolution="skip", actor="op",
                               reason="checked the mailbox")
        [entry] = read_audit(doubtful.id)
        assert (entry.action, entry.actor, entry.reason) == ("resolve", "op",
                                                             "checked the mailbox")
        assert (entry.before["status"], entry.after["status"]) == (r.NEEDS_ATTENTION, r.QUEUED)
        assert entry.after["resolution"] == "skip"

    # --- the function form -------------------------------------------------------------------
    def test_the_function_form_agent_runs_as_one_step(self, store):
        run = self.launch(store, "hello", {"name": "Ada"})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        done = store.load(run.id).run
        assert done.output == {"greeting": "hello, Ada"}
        assert done.step_no == 1
        assert WORLD.args == [("greet", "Ada")]
        assert self.checkpoint_steps(store, run.id) == [0]

    # --- large states: patch checkpoints ---------------------------------------------------
    def test_a_large_state_is_checkpointed_as_small_patches(self, store):
        run = self.launch(store, "big_state", {"n": 6})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        checkpoints = store.history(run.id).checkpoints
        full, patches = checkpoints[0], checkpoints[1:]
        assert full.codec != serde.PATCH_CODEC and patches
        assert all(c.codec == serde.PATCH_CODEC for c in patches)
        assert all(c.size < full.size / 20 for c in patches), [c.size for c in checkpoints]
        for c in checkpoints:  # every patch decodes to its own state
            assert serde.checkpoint_state(c, checkpoints)["i"] == c.step_no
        assert store.load(run.id).run.output["size"] == 1500

    def test_a_patch_chain_ends_at_what_a_resume_may_decode_even_across_a_resume(
            self, store, clock, monkeypatch):
        state = serde.raw_state(REG.get("big_state").start({"n": 9}))
        monkeypatch.setattr(serde, "CHAIN_DECODE_BYTES", int(3.5 * len(state)))  # 3 patches
        run = self.launch(store, "big_state", {"n": 9})
        crash_at("after_checkpoint", nth=3)  # mid-chain: the resume continues it
        self.crash(store, run.id, clock)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        checkpoints = store.history(run.id).checkpoints
        kinds = ["patch" if c.codec == serde.PATCH_CODEC else "full" for c in checkpoints]
        assert kinds == ["full", "patch", "patch", "patch"] * 2 + ["full"]  # steps 0-8
        assert serde.checkpoint_state(checkpoints[-2], checkpoints)["i"] == 7

    def test_a_patch_chain_ends_when_its_patches_outweigh_a_full_checkpoint(self, store,
                                                                             monkeypatch):
        def after(chain, blob, patched):  # as if the full checkpoints' weight were 2.5 patches
            if not patched:
                return serde.Chain(full_bytes=750 // serde.CHAIN_WEIGHT)
            return original(chain, blob, patched)

        original = serde.Chain.after
        monkeypatch.setattr(serde.Chain, "after", after)
        monkeypatch.setattr(serde, "encode_patch", lambda raw, base: b"p" * 300)
        run = self.launch(store, "big_state", {"n": 6})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        kinds = ["patch" if c.codec == serde.PATCH_CODEC else "full"
                 for c in store.history(run.id).checkpoints]
        assert kinds == ["full", "patch", "patch", "full", "patch", "patch"]  # steps 0-5

    def test_resume_and_rollback_across_a_patch_chain(self, store, clock):
        run = self.launch(store, "big_state", {"n": 8})
        crash_at("after_checkpoint", nth=5)
        self.crash(store, run.id, clock)
        loaded = store.load(run.id)
        assert loaded.checkpoint.codec == serde.PATCH_CODEC and loaded.bases
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        uninterrupted = store.load(run.id).run.output
        third = next(c for c in store.history(run.id).checkpoints if c.step_no == 3)
        control.rollback(store, run.id, checkpoint=third.number, actor="op", reason="redo")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == uninterrupted


class _CancelAfterClaim:
    """The store, with an operator's cancel landing right after each claim."""

    def __init__(self, store):
        self._store = store

    def claim(self, run_id, owner, lease_seconds, now, **kwargs):
        claimed = self._store.claim(run_id, owner, lease_seconds, now, **kwargs)
        if claimed is not None:
            control.cancel(self._store, run_id, actor="op", reason="just after the claim")
        return claimed

    def __getattr__(self, name):
        return getattr(self._store, name)


class _ControlBeforeWait:
    """The store, with an operator's pause or cancel landing just before the run's
    first commit that releases it into a wait (the operator saw it running)."""

    def __init__(self, store, act):
        self._store, self._act, self._done = store, act, False

    def commit(self, run_id, epoch, commit):
        if not self._done and commit.release and commit.run.get("status") == r.WAITING:
            self._done = True
            getattr(control, self._act)(self._store, run_id, actor="op", reason="late")
        return self._store.commit(run_id, epoch, commit)

    def __getattr__(self, name):
        return getattr(self._store, name)


class _FailingCommits:
    """The store, except that the first `times` commits matching `when` (all of them:
    None) raise as a lost connection does."""

    def __init__(self, store, when, times: int | None = 1):
        self._store, self._when, self._left = store, when, times

    def commit(self, run_id, epoch, commit):
        if self._left != 0 and self._when(commit):
            if self._left is not None:
                self._left -= 1
            raise ConnectionError("server closed the connection unexpectedly")
        return self._store.commit(run_id, epoch, commit)

    def __getattr__(self, name):
        return getattr(self._store, name)
