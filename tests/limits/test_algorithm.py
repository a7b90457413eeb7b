"""The sliding-window limit (runs/durable/policies/limits.py) on every store: the memory one, the
database and Redis (when REDIS_URL is set). Time is passed in, so no test waits."""

import threading

import pytest

from runs.durable.policies import limits as lim
from runs.limits.stores import OrmLimitStore, RedisLimitStore

T0 = 1_000_000.0


class Limiter:
    """One limit on a store, asked at chosen instants."""

    def __init__(self, store, rule):
        self.store, self.rule = store, rule

    def ask(self, key, at, user="alice", holder=1):
        """Each call is its own run here, named after the call's key."""
        return self.store.update(
            self.rule.name, lambda s: lim.admit(self.rule, s, key, user, T0 + at, holder, key))

    def end(self, key, at, tokens=0, holder=1):
        return self.store.update(self.rule.name,
                                 lambda s: lim.finish(self.rule, s, key, T0 + at, tokens, holder))

    def waiters(self):
        return self.store.update(self.rule.name, lambda s: s["waiters"])

    def close(self, until, at):
        self.store.update(self.rule.name,
                          lambda s: lim.close(self.rule, s, T0 + until, T0 + at))


def limiter(store, **rule):
    return Limiter(store, lim.LimitRule(name="llm", **rule))


def test_no_more_than_the_limit_starts_in_a_window(limit_store):
    llm = limiter(limit_store, requests=3, per=2.0)
    assert [llm.ask(f"k{i}", at=0.1 * i).allowed for i in range(3)] == [True] * 3
    for i in range(3):
        llm.end(f"k{i}", at=0.5)
    held = llm.ask("k3", at=1.0)
    assert not held.allowed and held.why == "requests"
    assert held.wake_at == pytest.approx(T0 + 2.5, abs=1e-6)  # the first call left the window
    assert not llm.ask("k3", at=2.4).allowed
    assert llm.ask("k3", at=2.5001).allowed


def test_a_call_counts_in_the_window_until_per_seconds_after_it_ended(limit_store):
    """It may reach the provider any time before it ends: counted from its start, two
    calls could land at the provider within one window and the limit be exceeded."""
    llm = limiter(limit_store, requests=1, per=2.0)
    assert llm.ask("slow", at=0).allowed
    assert not llm.ask("next", at=2.5).allowed  # still in flight: still in the window
    llm.end("slow", at=3.0)
    assert not llm.ask("next", at=4.9).allowed
    assert llm.ask("next", at=5.01).allowed


def test_concurrency_frees_a_slot_when_a_call_ends_or_its_lease_runs_out(limit_store):
    llm = limiter(limit_store, concurrency=2, lease=30.0)
    assert llm.ask("a", at=0).allowed and llm.ask("b", at=0).allowed
    held = llm.ask("c", at=1)
    assert not held.allowed and held.why == "concurrency"
    assert held.wake_at > T0 + 1
    assert llm.end("a", at=2).counted
    assert llm.ask("c", at=2).allowed
    # "b" never ends (its worker was SIGKILLed): its slot comes back with its lease
    assert not llm.ask("d", at=3).allowed
    llm.end("c", at=4)
    assert llm.ask("d", at=4).allowed
    assert not llm.ask("e", at=29).allowed
    assert llm.ask("e", at=31).allowed  # b's lease ran out at 30


def test_the_same_attempt_asking_again_about_its_call_takes_no_second_slot(limit_store):
    llm = limiter(limit_store, requests=1, per=60.0)
    assert llm.ask("k", at=0).allowed
    assert llm.ask("k", at=1).allowed  # the same holder: the same grant
    assert not llm.ask("other", at=1).allowed


def test_a_takeover_of_a_call_in_flight_is_another_request(limit_store):
    """The worker of epoch 1 lost the run mid-call; epoch 2 makes the call again: the
    provider may see both requests, so the second needs a slot of its own, and the first
    counts until its own end when it comes after the takeover (a live, fenced worker)."""
    llm = limiter(limit_store, requests=1, per=10.0)
    assert llm.ask("k", at=0, holder=1).allowed
    held = llm.ask("k", at=1, holder=2)
    assert not held.allowed and held.why == "requests"
    assert held.wake_at == pytest.approx(T0 + 11, abs=1e-6)  # the cut-off call taken as ended at 1
    assert llm.end("k", at=3, holder=1).counted  # it was alive: it really ended at 3
    assert not llm.ask("k", at=12, holder=2).allowed
    granted = llm.ask("k", at=13.01, holder=2)
    assert granted.allowed
    assert llm.end("k", at=14, holder=2).counted
    assert not llm.ask("other", at=23).allowed and llm.ask("other", at=24.01).allowed


def test_tokens_a_window_hold_calls_once_reached(limit_store):
    """A call's tokens are known once it ended: calls in flight count at the largest call
    seen, a call of unknown size goes alone, and one call may cross the limit."""
    llm = limiter(limit_store, tokens=1000, per=60.0)
    assert llm.ask("a", at=0).allowed
    held = llm.ask("b", at=0)  # a's size is not known: it goes alone
    assert not held.allowed and held.why == "tokens"
    assert llm.end("a", at=1, tokens=400).wakes == (lim.Wake("b", T0 + 1),)
    assert llm.ask("b", at=1).allowed  # 400 used, and b at 400 fits
    assert not llm.ask("c", at=1.5).allowed  # 400 used + b's 400 + its own 400 would not
    llm.end("b", at=2, tokens=700)  # 1,100: overshot by the call that crossed it
    held = llm.ask("c", at=3)
    assert not held.allowed and held.why == "tokens"
    assert held.wake_at == pytest.approx(T0 + 61, abs=1e-6)  # when a's 400 leave the window
    assert llm.ask("c", at=61.5).allowed


def test_a_retry_after_closes_the_limit_for_everyone_until_then(limit_store):
    llm = limiter(limit_store, requests=100, per=60.0)
    llm.close(until=30, at=1)
    llm.close(until=10, at=2)  # a shorter Retry-After never reopens it early
    held = llm.ask("k", at=5)
    assert not held.allowed and held.why == "closed"
    assert held.wake_at == pytest.approx(T0 + 30, abs=1e-6)
    assert llm.ask("k", at=30.5).allowed


def test_the_user_served_least_recently_goes_first(limit_store):
    """Alice's runs fill the window and queue; Bob's one run, arriving last, gets the
    next free slot; then Alice's waiters in the order they came."""
    llm = limiter(limit_store, requests=2, per=10.0)
    assert llm.ask("a0", at=0).allowed and llm.ask("a1", at=0).allowed
    llm.end("a0", at=0.5)
    llm.end("a1", at=0.6)
    for i in range(2, 6):
        assert not llm.ask(f"a{i}", at=1 + i * 0.01).allowed
    bob = llm.ask("b0", at=2, user="bob")
    assert not bob.allowed
    assert bob.wake_at == pytest.approx(T0 + 10.5, abs=1e-6)  # first in the queue: the first free slot
    # the slot a0 held frees at 10.5: Bob's, though four of Alice's waited longer
    assert not llm.ask("a2", at=10.55).allowed
    assert llm.ask("b0", at=10.6, user="bob").allowed
    # the next slot: Alice's turn (Bob was served last), her first waiter first
    assert not llm.ask("a3", at=10.7).allowed
    assert llm.ask("a2", at=10.7).allowed


def test_a_waiter_that_does_not_come_back_is_passed_over_after_the_grace(limit_store):
    """Its run was cancelled (or its wake-up lost): the slot kept for it goes to the
    caller behind it HEAD_GRACE after it was due, and it is woken once more."""
    llm = limiter(limit_store, requests=1, per=1.0)
    assert llm.ask("first", at=0).allowed
    llm.end("first", at=0)
    gone = llm.ask("gone", at=0.5)  # its run is cancelled: it never asks again
    assert not gone.allowed and gone.wake_at == pytest.approx(T0 + 1.0, abs=1e-6)
    # the slot is kept for it while it may be on its way; the caller behind it is told
    # to come back when the grace is over, in case it does not come
    behind = llm.ask("later", at=1.2)
    assert not behind.allowed and behind.why == "turn"
    assert behind.wake_at == pytest.approx(gone.wake_at + lim.queue.HEAD_GRACE, abs=1e-6)
    assert not llm.ask("later", at=3.9).allowed
    passed = llm.ask("later", at=4.0)
    assert passed.allowed
    assert passed.wakes == (lim.Wake("gone", T0 + 4.0),)  # its last chance
    assert not llm.ask("third", at=4.5).allowed
    llm.end("later", at=4.6)
    # back at last, it has kept its place: ahead of "third", who came later
    assert llm.ask("gone", at=5.7).allowed
    assert not llm.ask("third", at=5.8).allowed


def test_a_waiter_that_never_comes_back_leaves_the_queue(limit_store):
    llm = limiter(limit_store, concurrency=1)
    assert llm.ask("first", at=0).allowed
    assert not llm.ask("gone", at=1).allowed
    llm.end("first", at=2)
    assert set(llm.waiters()) == {"gone"}
    assert set(llm.ask("other", at=2 + lim.queue.WAITER_GRACE + 1).wakes) == set()
    assert "gone" not in llm.waiters()


def test_two_busy_users_take_turns(limit_store):
    llm = limiter(limit_store, requests=1, per=1.0)
    order, clock = [], 0.0
    pending = {"alice": [f"a{i}" for i in range(6)], "bob": [f"b{i}" for i in range(3)]}
    for user, keys in pending.items():
        for key in keys:
            llm.ask(key, at=clock, user=user)  # a0 gets the slot, the rest queue
    order.append("a0")
    llm.end("a0", at=clock)
    pending["alice"].remove("a0")
    while any(pending.values()):
        clock += 1.01
        for user, keys in pending.items():
            for key in list(keys):
                if llm.ask(key, at=clock, user=user).allowed:
                    order.append(key)
                    keys.remove(key)
                    llm.end(key, at=clock)
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4", "a5"]


def test_waiters_are_told_when_their_slots_surely_open(limit_store):
    """A slot held by a call in flight opens at the latest `per` after its lease: a
    waiter is told that, and woken to the sure time once the call ends. The waiter
    after the first gap comes when the grace of the one before it runs out, in case
    that one does not come."""
    llm = limiter(limit_store, requests=2, per=10.0, lease=60.0)
    assert llm.ask("a", at=0).allowed and llm.ask("b", at=1).allowed
    told = [llm.ask(f"w{i}", at=2).wake_at - T0 for i in range(3)]
    assert told == pytest.approx([70, 71, 140])
    assert llm.end("a", at=3).wakes == (lim.Wake("w0", T0 + 13), lim.Wake("w1", T0 + 16))
    assert llm.end("b", at=4).wakes == (lim.Wake("w1", T0 + 14), lim.Wake("w2", T0 + 17))


def test_a_slot_given_back_wakes_the_waiter_whose_turn_it_is_at_once(limit_store):
    llm = limiter(limit_store, concurrency=2)
    assert llm.ask("a", at=0).allowed and llm.ask("b", at=0).allowed
    for i, user in enumerate(["alice", "alice", "bob", "alice"]):
        assert not llm.ask(f"w{i}", at=1 + 0.1 * i, user=user).allowed
    # Bob was never served: his waiter's turn comes first, then Alice's oldest
    assert llm.end("a", at=5).wakes == (lim.Wake("w2", T0 + 5), lim.Wake("w0", T0 + 8))
    assert not llm.ask("w0", at=5.1).allowed  # the slot is Bob's
    assert llm.ask("w2", at=5.2, user="bob").allowed
    assert llm.end("b", at=6).wakes == (lim.Wake("w0", T0 + 6), lim.Wake("w1", T0 + 9))
    assert llm.ask("w0", at=6.1).allowed


def test_a_timer_is_never_moved_later(limit_store):
    """Bob's waiter comes in ahead of Alice's: hers is not told to come later (it may
    not be waiting any more to be told); coming back early, she is told again."""
    llm = limiter(limit_store, requests=1, per=10.0)
    assert llm.ask("a0", at=0).allowed
    llm.end("a0", at=0)
    first = llm.ask("a1", at=1)
    assert first.wake_at == pytest.approx(T0 + 10, abs=1e-6)
    assert llm.ask("b0", at=2, user="bob").wakes == ()
    again = llm.ask("a1", at=10)
    assert not again.allowed and again.why == "turn"
    assert llm.ask("b0", at=10.5, user="bob").allowed


def test_racing_workers_never_let_more_than_the_limit_through(limit_store):
    """Eight threads ask at once, as two processes would (on the database each thread has
    its own connection; on Redis two stores, each with its own connections and turns):
    the store's update is atomic, so exactly the limit is let through."""
    twin = RedisLimitStore(limit_store.url, limit_store.prefix) \
        if isinstance(limit_store, RedisLimitStore) else limit_store
    rule = lim.LimitRule(name="llm", requests=10, per=60.0)
    processes = [Limiter(limit_store, rule), Limiter(twin, rule)]
    allowed, errors = [], []

    def ask(worker):
        llm = processes[worker % 2]
        try:
            for n in range(5):
                if llm.ask(f"w{worker}-{n}", at=1, user=f"u{worker}").allowed:
                    allowed.append((worker, n))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            if isinstance(limit_store, OrmLimitStore):
                from django.db import connection

                connection.close()

    threads = [threading.Thread(target=ask, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(allowed) == 10


@pytest.mark.parametrize("data,error", [
    ({}, "say requests"),
    ({"requests": 0}, "whole number"),
    ({"requests": 5, "per": 0}, "per must be"),
    ({"requests": 5, "burst": 3}, "unknown keys"),
])
def test_a_limit_that_cannot_be_applied_is_refused(data, error):
    with pytest.raises(lim.LimitConfigError, match=error):
        lim.LimitRule.of("llm", data)


def test_a_limit_reads_as_people_say_it():
    assert lim.LimitRule("llm", requests=60, per=60).describe() == "60 requests a minute"
    assert lim.LimitRule("llm", requests=10, per=2).describe() == "10 requests per 2 s"
    assert lim.LimitRule("x", tokens=200000, concurrency=4).describe() == \
        "200,000 tokens a minute, 4 at a time"
