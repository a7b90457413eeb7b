"""The contract of code versions (docs/deploys.md; runs/durable/versions.py, verify.py,
upgrade.py), on any Store: a deploy never makes a logged effect again.

Mixed into the store contract's subclasses with the same fixtures. The writer of
tests/durable/agents_versions.py posts a unit per step to WORLD.target (idempotent, by
key) and notes it (not idempotent); each of its codes is a registry, as a worker of
that deploy would have it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from runs.durable import Outcome, control, execute_run, idempotency_key, upgrade, versions
from runs.durable import records as r
from runs.durable.faults import InjectedFault, faults

from .agents_for_tests import REG, WORLD, SimulatedCrash
from .agents_versions import (
    REG_COUNTED,
    REG_DEPRECATED,
    REG_PATCHED,
    REG_REPLAY,
    REG_V2,
    REG_V3,
)
from .agents_versions_tweak import REG_TWEAKED
from .contract import LEASE, wait_until, worker


def fingerprint(registry) -> str:
    return versions.fingerprint(registry.agents["writer"])


class VersionsContract:
    def launch_writer(self, store, n: int = 6, registry=REG) -> r.RunRecord:
        return control.launch(store, agent="writer", inputs={"n": n}, registry=registry)

    def keys_per_unit(self) -> dict[int, set[str]]:
        """unit -> the idempotency keys it reached the target under."""
        keys = defaultdict(set)
        for key, payload in WORLD.target.requests:
            keys[payload["unit"]].add(key)
        return dict(keys)

    def assert_each_unit_once(self, n: int) -> None:
        assert {unit: len(keys) for unit, keys in self.keys_per_unit().items()} == \
            {unit: 1 for unit in range(1, n + 1)}
        assert sorted(arg for name, arg in WORLD.args if name == "note") == list(range(1, n + 1))

    def handed_off_in_step(self, store, run_id: str, unit: int) -> None:
        """v1 runs until a deploy's SIGTERM lands in step `unit`, after its post."""
        WORLD.flags["stop_after_post"] = unit
        assert execute_run(store, run_id, worker(), registry=REG,
                           stop_event=WORLD.stop_event) == Outcome.HANDED_OFF
        WORLD.stop_event.clear()

    def crashed_in_step(self, store, run_id: str, unit: int, clock) -> None:
        """v1's worker dies in step `unit`, after its post: nothing since the last
        checkpoint is checkpointed."""
        WORLD.crash_plan["after_post"] = unit
        self.crash(store, run_id, clock)

    def starved_in_step(self, store, run_id: str, unit: int, clock):
        """A worker alive but starved in step `unit`, after its post (its lease keeper
        cannot renew: the test armed that): its lease runs out and the run is due again.
        Returns the worker's future and the Event that lets it go on."""
        stall = {"unit": unit, "stalled": threading.Event(), "go": threading.Event()}
        WORLD.flags["stall_after_post"] = stall
        starved = self.in_thread(lambda: execute_run(
            store, run_id, worker(f"starved{unit}", lease_seconds=1), registry=REG))
        assert stall["stalled"].wait(5)
        clock.advance(5)
        wait_until(lambda: run_id in store.due_runs(time.time()), what="the lease to run out")
        return starved, stall["go"]

    def version_events(self, read_events, run_id: str) -> list[dict]:
        return [data for _, kind, data in read_events(run_id) if kind == "version"]

    # --- the hand-off -------------------------------------------------------------------------
    def test_a_hand_off_checkpoints_the_steps_completed_since_the_last_checkpoint(self, store):
        run = self.launch_writer(store)
        self.handed_off_in_step(store, run.id, 5)  # steps 4 and 5's post since step 3's
        latest = store.load(run.id).checkpoint
        assert (latest.step_no, latest.reason) == (4, "shutdown")
        assert [(e.step_no, e.tool) for e in store.load(run.id).effects] == [
            (5, "tests.post_unit")]

    # --- a clean replay moves the run ---------------------------------------------------------
    def test_a_compatible_change_moves_the_run_where_it_stands_with_its_keys(self, store,
                                                                            read_events):
        run = self.launch_writer(store)
        self.handed_off_in_step(store, run.id, 4)
        posted_before = list(WORLD.target.requests)
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.SUCCEEDED
        done = store.load(run.id).run
        assert (done.agent_version, done.code_fingerprint, done.branch) == (
            "2", fingerprint(REG_V2), 1)
        [moved] = self.version_events(read_events, run.id)
        assert (moved["from_version"], moved["to_version"], moved["how"], moved["step"]) == (
            "1", "2", "replay", 3)
        assert (moved["replayed_steps"], moved["effects"]) == (3, 7)  # 3 steps, then 4th's post
        # unit 4's post was replayed from the log, not made again; every key is branch 1's
        assert WORLD.target.requests[:len(posted_before)] == posted_before
        self.assert_each_unit_once(6)
        assert {key for keys in self.keys_per_unit().values() for key in keys} == {
            idempotency_key(run.id, 1, step, 0) for step in range(1, 7)}

    def test_a_change_nobody_bumped_the_version_for_is_replayed_too(self, store, read_events):
        run = self.launch_writer(store)
        self.handed_off_in_step(store, run.id, 2)
        assert fingerprint(REG_TWEAKED) != fingerprint(REG)
        assert self.execute(store, run.id, registry=REG_TWEAKED) == Outcome.SUCCEEDED
        [moved] = self.version_events(read_events, run.id)
        assert (moved["from_version"], moved["to_version"]) == ("1", "1")
        assert (moved["from_code"], moved["to_code"]) == (fingerprint(REG), fingerprint(REG_TWEAKED))
        self.assert_each_unit_once(6)

    def test_a_run_that_has_not_started_moves_without_a_replay(self, store, read_events):
        run = self.launch_writer(store, n=2)
        assert self.execute(store, run.id, registry=REG_V3) == Outcome.SUCCEEDED
        assert store.load(run.id).run.agent_version == "3"
        assert WORLD.calls["audit_unit"] == 2

    # --- a diverging history waits for its code ---------------------------------------------
    def test_an_incompatible_change_hands_the_run_back_saying_where_it_diverges(self, store,
                                                                               clock):
        run = self.launch_writer(store)
        self.crashed_in_step(store, run.id, 5, clock)
        calls = dict(WORLD.calls)
        assert self.execute(store, run.id, registry=REG_V3) == Outcome.VERSION_WAIT
        waiting = store.load(run.id).run
        assert (waiting.status, waiting.agent_version, waiting.lease_owner) == (r.QUEUED, "1", None)
        assert waiting.attention["message"] == (
            "waiting for a worker with version 1: diverges at step 1, call 1 "
            "(tests.audit_unit where the history has tests.post_unit)")
        assert waiting.attention["divergence"]["step_no"] == 1
        assert dict(WORLD.calls) == calls  # the replay called nothing
        # v3's workers claim it no more; v1's still do
        v3 = versions.worker_codes(versions.codes_of(REG_V3.classes()), {})
        v1 = versions.worker_codes(versions.codes_of(REG.classes()), {})
        assert run.id not in store.due_runs(time.time(), codes=v3)
        assert store.claim(run.id, "w3", 5, time.time(), codes=v3) is None
        assert run.id in store.due_runs(time.time(), codes=v1)
        assert self.execute(store, run.id, registry=REG) == Outcome.SUCCEEDED
        self.assert_each_unit_once(6)

    def test_a_worker_never_moves_a_run_to_an_older_version(self, store):
        run = self.launch_writer(store, registry=REG_V2)
        assert self.execute(store, run.id, registry=REG) == Outcome.VERSION_WAIT
        waiting = store.load(run.id).run
        assert waiting.attention["message"] == ("waiting for a worker with version 2: it is "
                                                "later than this worker's version 1")
        assert WORLD.calls == {}

    def test_a_move_resumes_from_what_it_wrote_without_reading_the_run_again(self, store,
                                                                             read_events):
        run = self.launch_writer(store)
        self.handed_off_in_step(store, run.id, 4)
        noted = _Noted(store)
        assert execute_run(noted, run.id, worker(), registry=REG_COUNTED) == Outcome.SUCCEEDED
        moved = noted.calls.index("commit")  # the move's commit comes first
        assert "load" not in noted.calls[moved:]
        # it resumed from the new code's state at step 3, which counts steps 1-3 too
        assert store.get(run.id).output == {"posted": [1, 2, 3, 4, 5, 6], "counted": 6}
        assert [c.reason for c in store.history(run.id).checkpoints][-2:] == ["step", "upgrade"]
        [resumed] = [data for _, kind, data in read_events(run.id)
                     if kind == "status" and data.get("resumed_from") and
                     data.get("epoch") == store.get(run.id).epoch]
        assert resumed["resumed_from"] == store.history(run.id).checkpoints[-1].number
        self.assert_each_unit_once(6)

    def test_a_move_commits_under_the_claims_epoch(self, store):
        run = self.launch_writer(store)
        self.handed_off_in_step(store, run.id, 4)
        # an operator takes the run over while the new code replays its history
        racing = _ActAfterClaim(store, lambda: control.pause(store, run.id, actor="op"))
        assert execute_run(racing, run.id, worker(), registry=REG_V2) == Outcome.FENCED
        paused = store.load(run.id).run
        assert (paused.status, paused.agent_version) == (r.PAUSED, "1")

    # --- takeovers and the crash-loop guard ---------------------------------------------------
    def test_takeovers_of_a_starved_worker_that_made_progress_are_no_crash_loop(self, store,
                                                                                clock):
        # three leases run out (a lease keeper late under load, a hand-off slower than
        # the lease), each after the run went further, before its next checkpoint (step 3)
        run = self.launch_writer(store)

        def renewal_fails():
            if threading.current_thread().name.startswith("lease-"):
                raise InjectedFault("this worker's lease keeper is starved")

        faults.arm("lease_renewal", renewal_fails)
        starved = [self.starved_in_step(store, run.id, unit, clock) for unit in (1, 2, 3)]
        assert store.get(run.id).step_no == 0
        assert self.execute(store, run.id, worker("w4", lease_seconds=60)) == Outcome.SUCCEEDED
        for future, go in starved:
            go.set()
            assert future.result(timeout=5) == Outcome.FENCED
        assert store.get(run.id).attention is None
        self.assert_each_unit_once(6)

    def test_three_crashes_in_one_place_are_a_crash_loop_though_its_step_logged_effects(
            self, store, clock):
        run = self.launch_writer(store)
        for _ in range(3):
            self.crashed_in_step(store, run.id, 2, clock)  # after step 1 and step 2's post
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        stuck = store.get(run.id)
        assert (stuck.attention["kind"], stuck.crash_count) == ("crash_loop", 3)
        assert stuck.attention["message"] == "the run crashed its worker 3 times in step 1"
        # the replays made nothing again
        assert (WORLD.calls["post_unit"], WORLD.calls["note"]) == (2, 1)

    # --- operators' upgrades ------------------------------------------------------------------
    def test_an_upgrade_from_a_divergence_makes_no_logged_effect_again(self, store, clock,
                                                                      read_events):
        run = self.launch_writer(store)
        self.crashed_in_step(store, run.id, 5, clock)  # logged since step 3: 4's post and
        assert self.execute(store, run.id, registry=REG_V3) == Outcome.VERSION_WAIT  # note, 5's post
        preview = upgrade.preview(store, [run.id], registry=REG_V3)
        assert (preview["clean"], preview["diverging"]) == (0, 1)
        assert (preview["effects_kept"], preview["effects_carried"]) == (6, 3)
        assert preview["summary"].startswith("0 runs replay cleanly, 1 diverge: at step 1 (1); "
                                             "effects kept: 6; effects dropped: 0; 3 effects")
        upgraded = upgrade.upgrade(store, run.id, actor="op", reason="v3", registry=REG_V3)
        assert (upgraded.branch, upgraded.step_no, upgraded.agent_version) == (2, 3, "3")
        assert self.execute(store, run.id, registry=REG_V3) == Outcome.SUCCEEDED
        # units 4 and 5 reached the target once, under branch 1's keys; note 4 was not
        # made again; v3's audits are new
        self.assert_each_unit_once(6)
        assert self.keys_per_unit()[5] == {idempotency_key(run.id, 1, 5, 0)}
        assert sorted(arg for name, arg in WORLD.args if name == "audit_unit") == [4, 5, 6]
        effects = store.history(run.id).effects
        assert not [e for e in effects if e.carried]  # every carried effect was taken over
        taken = {e.key: e.position for e in effects if e.tool == "tests.post_unit"}
        assert taken[idempotency_key(run.id, 1, 5, 0)] == (2, 5, 1)
        assert [d["how"] for d in self.version_events(read_events, run.id)] == ["operator"]

    def test_an_upgrade_of_a_run_that_replays_cleanly_moves_it_in_place(self, store):
        run = self.launch_writer(store)
        self.handed_off_in_step(store, run.id, 4)
        control.pause(store, run.id, actor="op")
        upgraded = upgrade.upgrade(store, run.id, actor="op", registry=REG_V2)
        assert (upgraded.status, upgraded.branch, upgraded.agent_version) == (r.QUEUED, 1, "2")
        assert self.execute(store, run.id, registry=REG_V2) == Outcome.SUCCEEDED
        self.assert_each_unit_once(6)

    # --- patch markers ------------------------------------------------------------------------
    def test_a_patch_marker_takes_old_histories_over_deterministically(self, store, clock):
        run = self.launch_writer(store)
        self.crashed_in_step(store, run.id, 5, clock)
        # v4 audits behind ctx.patched("audit"): the old history replays, so it moves
        WORLD.crash_plan["after_post"] = 6  # and crashes in its first patched step
        with pytest.raises(SimulatedCrash):
            self.execute(store, run.id, registry=REG_PATCHED)
        assert store.load(run.id).run.agent_version == "4"
        clock.advance(LEASE + 1)  # past the crashed worker's lease
        assert self.execute(store, run.id, registry=REG_PATCHED) == Outcome.SUCCEEDED
        self.assert_each_unit_once(6)
        # only the step that ran on v4 audited, once, and recorded its marker
        assert [arg for name, arg in WORLD.args if name == "audit_unit"] == [6]
        markers = [e for e in store.history(run.id).effects if e.kind == r.PATCH]
        assert [(e.step_no, e.seq, e.tool) for e in markers] == [(6, 0, "audit")]
        history = store.history(run.id, r.HistoryQuery(replay=1))
        done = store.get(run.id)
        assert upgrade.replay_history(done, REG_PATCHED.get("writer"), history).clean
        v1 = upgrade.replay_history(done, REG.get("writer"), history)
        assert v1.divergence.describe() == ("diverges at step 6, call 1 (tests.post_unit where "
                                            "the history has patch marker audit)")

    def test_a_deprecated_patch_replays_the_histories_that_have_its_marker(self, store):
        run = self.launch_writer(store, n=3, registry=REG_PATCHED)
        assert self.execute(store, run.id, registry=REG_PATCHED) == Outcome.SUCCEEDED
        done, history = store.get(run.id), store.history(run.id, r.HistoryQuery(replay=1))
        assert upgrade.replay_history(done, REG_DEPRECATED.get("writer"), history).clean
        assert not upgrade.replay_history(done, REG.get("writer"), history).clean

    # --- which worker claims which run --------------------------------------------------------
    def test_workers_claim_their_own_code_and_take_over_only_orphans(self, store):
        old = self.launch_writer(store)
        new = self.launch_writer(store, registry=REG_V2)
        mine_v1 = versions.codes_of(REG.classes())
        mine_v2 = versions.codes_of(REG_V2.classes())
        both_live = {**mine_v1, **mine_v2}
        v2 = versions.worker_codes(mine_v2, both_live)
        now = time.time()
        assert store.due_runs(now, codes=v2) == [new.id]
        assert store.claim(old.id, "w2", 5, now, codes=v2) is None  # v1's workers are alive
        v1 = versions.worker_codes(mine_v1, both_live)
        assert store.due_runs(now, codes=v1) == [old.id]  # never v2's: it is not v1's code
        orphaned = versions.worker_codes(mine_v2, mine_v2)  # v1's workers are gone
        assert set(store.due_runs(now, codes=orphaned)) == {old.id, new.id}
        eager = versions.worker_codes(versions.codes_of(REG_REPLAY.classes()), both_live)
        assert old.id in store.due_runs(now, codes=eager)  # upgrade="replay", a later version
        assert store.claim(old.id, "w2", 5, now, codes=eager) is not None


class _Noted:
    """The store, noting the name of each method called on it, in order."""

    def __init__(self, store):
        self._store, self.calls = store, []

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def noted(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)
        return noted


class _ActAfterClaim:
    """The store, with another action landing right after the first claim."""

    def __init__(self, store, act):
        self._store, self._act = store, act

    def claim(self, *args, **kwargs):
        claimed = self._store.claim(*args, **kwargs)
        if claimed is not None and self._act is not None:
            self._act()
            self._act = None
        return claimed

    def __getattr__(self, name):
        return getattr(self._store, name)

