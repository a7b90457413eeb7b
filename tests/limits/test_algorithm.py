"""The sliding-window limit (runs/durable/limits.py) on every store: the memory one, the
database and Redis (when REDIS_URL is set). Time is passed in, so no test waits."""

import threading

import pytest

from runs.durable import limits as lim
from runs.limits.stores import OrmLimitStore, RedisLimitStore

T0 = 1_000_000.0


class Limiter:
    """One limit on a store, asked at chosen instants."""

    def __init__(self, store, rule):
        self.store, self.rule = store, rule

    def ask(self, key, at, user="alice", holder=1):
        return self.store.update(self.rule.name,
                                 lambda s: lim.admit(self.rule, s, key, user, T0 + at, holder))

    def end(self, key, at, tokens=0, holder=1):
        return self.store.update(self.rule.name,
                                 lambda s: lim.finish(self.rule, s, key, T0 + at, tokens, holder))

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
    assert held.wake_at == pytest.approx(T0 + 2.5)  # the first call left the window
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
    assert llm.end("a", at=2)
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
    assert held.wake_at == pytest.approx(T0 + 11)  # the cut-off call taken as ended at 1
    assert llm.end("k", at=3, holder=1)  # it was alive: it really ended at 3
    assert not llm.ask("k", at=12, holder=2).allowed
    granted = llm.ask("k", at=13.01, holder=2)
    assert granted.allowed
    assert llm.end("k", at=14, holder=2)
    assert not llm.ask("other", at=23).allowed and llm.ask("other", at=24.01).allowed


def test_tokens_a_window_hold_calls_once_reached(limit_store):
    llm = limiter(limit_store, tokens=1000, per=60.0)
    assert llm.ask("a", at=0).allowed
    assert llm.ask("b", at=0).allowed  # a's tokens are not known until it ends
    llm.end("a", at=1, tokens=700)
    llm.end("b", at=2, tokens=400)  # 1,100: overshot by the call that crossed it
    held = llm.ask("c", at=3)
    assert not held.allowed and held.why == "tokens"
    assert held.wake_at == pytest.approx(T0 + 61)  # when a's 700 leave the window
    assert llm.ask("c", at=61.5).allowed


def test_a_retry_after_closes_the_limit_for_everyone_until_then(limit_store):
    llm = limiter(limit_store, requests=100, per=60.0)
    llm.close(until=30, at=1)
    llm.close(until=10, at=2)  # a shorter Retry-After never reopens it early
    held = llm.ask("k", at=5)
    assert not held.allowed and held.why == "closed"
    assert held.wake_at == pytest.approx(T0 + 30)
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
    assert bob.wake_at == pytest.approx(T0 + 10.5)  # first in the queue: the first free slot
    # the slot a0 held frees at 10.5: Bob's, though four of Alice's waited longer
    assert not llm.ask("a2", at=10.55).allowed
    assert llm.ask("b0", at=10.6, user="bob").allowed
    # the next slot: Alice's turn (Bob was served last), her first waiter first
    assert not llm.ask("a3", at=10.7).allowed
    assert llm.ask("a2", at=10.7).allowed


def test_a_waiter_that_never_comes_back_leaves_the_queue(limit_store):
    llm = limiter(limit_store, requests=1, per=1.0)
    assert llm.ask("first", at=0).allowed
    llm.end("first", at=0)
    gone = llm.ask("gone", at=0.5)  # its run is cancelled: it never asks again
    assert not gone.allowed
    # the slot is kept for it a while: the next caller looks again calmly, not in a loop
    behind = llm.ask("later", at=1.2)
    assert not behind.allowed and behind.why == "turn"
    assert behind.wake_at >= T0 + 1.2 + lim.TURN_POLL
    late = gone.wake_at - T0 + lim.WAITER_GRACE + 0.1
    assert llm.ask("later", at=late).allowed


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


def test_waiters_are_spread_over_the_windows_to_come(limit_store):
    llm = limiter(limit_store, requests=2, per=10.0)
    llm.ask("a", at=0)
    llm.ask("b", at=1)
    llm.end("a", at=0)
    llm.end("b", at=1)
    wakes = [llm.ask(f"w{i}", at=2).wake_at - T0 for i in range(5)]
    assert wakes == pytest.approx([10, 11, 20, 21, 30])


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
