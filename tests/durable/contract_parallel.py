"""The contract of ctx.parallel / ctx.map and of streaming tools, on any Store.

Mixed into the store contract's subclasses (tests/durable/test_memory_store.py,
tests/test_store_contract_orm.py), with the same fixtures.
"""

from __future__ import annotations

import pytest

from runs.durable import Outcome
from runs.durable import records as r
from runs.durable.faults import faults

from . import agents_parallel as ap
from .agents_for_tests import WORLD, SimulatedCrash
from .contract import crash_at

ITEMS = ["i0", "i1", "i2", "i3"]
# Every point of a group of four: before each call reaches the world, and after each
# is made but before its outcome is logged.
GROUP_POINTS = [(p, n) for p in ("before_effect", "after_effect_before_log")
                for n in range(1, 5)]


def crash_in_call_of(item: str, once_started: tuple[str, ...] = ()) -> None:
    """The worker dies once the call for `item` has been made, before its outcome is
    logged (in whichever order the group's threads get there), and not before the calls
    for `once_started` have begun: a crash stops the group's calls not started yet."""
    def action():
        if ap.item_of_this_thread() == item:
            faults.disarm()
            for other in once_started:
                assert ap.started_event(other).wait(30), f"the call for {other} never began"
            raise SimulatedCrash(f"after_effect_before_log of {item}")

    faults.arm("after_effect_before_log", action)


class ParallelContract:
    def group_effects(self, store, run_id: str) -> list[r.EffectRecord]:
        return sorted((e for e in store.history(run_id).effects if e.step_no == 1),
                      key=lambda e: e.seq)

    def test_results_come_in_the_order_asked_not_the_order_finished(self, store):
        ap.reset_running()
        run = self.launch(store, "par_items", {"items": ITEMS, "reverse": True, "limit": 4})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"items": ITEMS, "after": "noted after"}
        finished = [a for name, a in WORLD.args if name == "slow_item"]
        assert finished == ITEMS[::-1]  # the later ones finished first
        effects = self.group_effects(store, run.id)
        assert [(e.seq, e.tool, e.status) for e in effects] == \
            [(i, "tests.slow_item", r.DONE) for i in range(4)] + [(4, "tests.note", r.DONE)]
        assert [e.result["payload"]["item"] for e in effects[:4]] == ITEMS

    def test_no_more_calls_run_at_once_than_max_concurrency(self, store):
        ap.reset_running()
        run = self.launch(store, "par_items", {"items": ITEMS, "pair": True, "limit": 2})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output["items"] == ITEMS
        assert ap.running_most() == 2  # the first waits for the second: two at once, no more

    def test_a_call_gives_its_slot_to_the_next_while_its_outcome_is_logged(self, store):
        """max_concurrency bounds calls to the world, not commits: with one slot, the
        second call starts while the first one's outcome is still being written."""
        ap.reset_running()
        slow_log = _SlowOutcomeLog(store, item="i0", waits_for="i1")
        run = self.launch(store, "par_items", {"items": ["i0", "i1"], "limit": 1})
        assert self.execute(slow_log, run.id) == Outcome.SUCCEEDED
        assert slow_log.next_started_meanwhile is True
        assert ap.running_most() == 1

    @pytest.mark.parametrize("point, nth", GROUP_POINTS)
    def test_a_crash_at_any_point_of_a_group_replays_to_the_same_results(self, store, clock,
                                                                         point, nth):
        run = self.launch(store, "par_items", {"items": ITEMS, "delay": 0.01, "limit": 4})
        crash_at(point, nth)
        self.crash(store, run.id, clock)
        logged = [e for e in self.group_effects(store, run.id) if e.status == r.DONE]
        calls_before = WORLD.calls["slow_item"]
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"items": ITEMS, "after": "noted after"}
        # the calls logged before the crash replayed; the others were made again
        done_items = [e for e in logged if e.tool == "tests.slow_item"]
        assert WORLD.calls["slow_item"] == calls_before + 4 - len(done_items)
        assert len(WORLD.target.work) == 4  # under their keys: the work was done once each
        assert WORLD.calls["note"] == 1
        effects = self.group_effects(store, run.id)
        assert [e.result["payload"]["item"] for e in effects[:4]] == ITEMS, \
            [(e.seq, e.tool, e.status, e.result) for e in effects]
        assert [e.key for e in effects[:4]] == [f"{run.id}:1:1:{i}" for i in range(4)]

    @pytest.mark.parametrize("nth", [1, 2, 3])
    def test_an_unfinished_non_idempotent_call_of_a_group_is_in_doubt(self, store, clock, nth):
        run = self.launch(store, "par_mixed")
        crash_at("after_effect_before_log", nth)
        self.crash(store, run.id, clock)
        noted = next((e for e in self.group_effects(store, run.id) if e.tool == "tests.note"),
                     None)  # None: the crash came before it started
        outcome = self.execute(store, run.id)
        if noted is not None and noted.status == r.INTENT:  # it was the call cut short: it may have happened
            assert outcome == Outcome.NEEDS_ATTENTION
            attention = store.load(run.id).run.attention
            assert (attention["kind"], attention["seq"]) == ("in_doubt", 1)
            assert WORLD.calls["note"] == 1  # never repeated without an operator
        else:
            assert outcome == Outcome.SUCCEEDED
            assert store.load(run.id).run.output == {"a": "a", "b": "noted b", "c": "c"}
            assert WORLD.calls["note"] == 1

    @pytest.mark.parametrize("replayed", [
        ["i1", "i0", "i2", "i3"],        # the same calls in another order
        ["i0", "i1", "i2"],              # one fewer
        ["i0", "i1", "i2", "i3", "i4"],  # one more
        ["i0", "changed", "i2", "i3"],   # another call at a logged position
    ])
    def test_a_different_set_of_calls_on_replay_is_non_determinism(self, store, clock,
                                                                   replayed):
        ap.reset_running()
        run = self.launch(store, "par_items", {"items": ITEMS, "reverse": True, "limit": 4})
        # i3 finishes first and dies before its outcome is logged; i0-i2 log theirs. Not
        # "the first to reach the point": i2 starts once i3's tool has returned, and on a
        # loaded machine may reach the point before i3's thread does. Nor before i0-i2 have
        # begun: on a loaded CI machine i0's thread had not taken its slot when i3 died,
        # so the crash left it not started.
        crash_in_call_of("i3", once_started=("i0", "i1", "i2"))
        self.crash(store, run.id, clock)
        assert [e.seq for e in self.group_effects(store, run.id) if e.status == r.DONE] == \
            [0, 1, 2]
        WORLD.flags["items"] = replayed
        assert self.execute(store, run.id) == Outcome.NEEDS_ATTENTION
        attention = store.load(run.id).run.attention
        assert attention["kind"] == "non_determinism"
        assert attention["position"][1] == 1

    def test_failed_calls_come_back_in_their_places(self, store):
        run = self.launch(store, "par_map_errors")
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"errors": ["ToolFailedError"] * 2}

    def test_bad_concurrency_is_refused(self, store):
        run = self.launch(store, "par_items", {"items": ITEMS, "limit": 0})
        assert self.execute(store, run.id) == Outcome.FAILED
        assert "max_concurrency" in store.load(run.id).run.error["message"]
        assert not WORLD.calls  # refused before any call

    # --- streaming tools ----------------------------------------------------------------
    def streams(self, read_events, run_id):
        return [d for _, kind, d in read_events(run_id) if kind == "stream"]

    def test_a_streamed_result_is_logged_whole_and_its_chunks_are_batched(self, store,
                                                                          read_events):
        text = " ".join(f"w{n}" for n in range(60))
        run = self.launch(store, "streamer", {"text": text, "pause": 0.004})
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        assert store.load(run.id).run.output == {"said": {"text": text, "words": 60}}
        streams = self.streams(read_events, run.id)
        assert "".join(d["text"] for d in streams) == text
        assert 1 < len(streams) < 30  # batched: about 10 a second, not one per word
        assert {d["attempt"] for d in streams} == {streams[0]["attempt"]}
        offsets = [d["offset"] for d in streams]
        assert offsets == [sum(len(d["text"]) for d in streams[:i]) for i in range(len(streams))]
        events = read_events(run.id)
        last_stream = max(seq for seq, kind, _ in events if kind == "stream")
        effect = next(seq for seq, kind, d in events if kind == "effect" and
                      d["key"] == streams[0]["key"] and d["status"] == r.DONE)
        assert effect == last_stream + 1  # the last batch rode with the outcome

    def test_a_stream_cut_short_is_streamed_again_as_a_new_attempt_under_its_key(
            self, store, clock, read_events):
        text = " ".join(f"w{n}" for n in range(20))
        run = self.launch(store, "streamer", {"text": text, "pause": 0.03})
        WORLD.flags["die_after"] = 12
        self.crash(store, run.id, clock)
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        streams = self.streams(read_events, run.id)
        attempts = list(dict.fromkeys(d["attempt"] for d in streams))
        assert len(attempts) == 2
        first = "".join(d["text"] for d in streams if d["attempt"] == attempts[0])
        second = "".join(d["text"] for d in streams if d["attempt"] == attempts[1])
        assert first and text.startswith(first) and first != text  # cut short
        assert second == text
        assert {d["key"] for d in streams} == {f"{run.id}:1:1:0"}
        assert [a for name, a in WORLD.args if name == "words"] == [f"{run.id}:1:1:0"] * 2
        assert store.load(run.id).run.output["said"]["text"] == text

    def test_an_attempt_that_fails_mid_stream_is_followed_by_the_retry(self, store,
                                                                       read_events):
        text = " ".join(f"w{n}" for n in range(10))
        run = self.launch(store, "streamer", {"text": text, "pause": 0.02})
        WORLD.flags["fail_after"] = 6
        assert self.execute(store, run.id) == Outcome.SUCCEEDED
        streams = self.streams(read_events, run.id)
        attempts = list(dict.fromkeys(d["attempt"] for d in streams))
        assert [a.split(".")[1] for a in attempts] == ["1", "2"]  # one session, two attempts
        first = "".join(d["text"] for d in streams if d["attempt"] == attempts[0])
        assert first == " ".join(text.split(" ")[:6])  # what it sent before it broke off
        assert "".join(d["text"] for d in streams if d["attempt"] == attempts[1]) == text
        kinds = [kind for _, kind, d in read_events(run.id) if kind in ("stream", "attempt")]
        assert kinds.index("attempt") > 0 and kinds[-1] == "stream"


class _SlowOutcomeLog:
    """The store, with the commit of `item`'s outcome held until the call of `waits_for`
    has begun (or 30 s have passed: then it did not begin meanwhile)."""

    def __init__(self, store, *, item: str, waits_for: str):
        self._store, self._item, self._waits_for = store, item, waits_for
        self.next_started_meanwhile = None

    def commit(self, run_id, epoch, commit):
        if self.next_started_meanwhile is None and any(
                e.tool == "tests.slow_item" and e.status == r.DONE
                and e.result["payload"]["item"] == self._item for e in commit.effects):
            self.next_started_meanwhile = ap.started_event(self._waits_for).wait(30)
        return self._store.commit(run_id, epoch, commit)

    def __getattr__(self, name):
        return getattr(self._store, name)
