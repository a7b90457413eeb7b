"""A limit with many runs waiting lets its whole rate through: the issue's case (a limit
of 10 requests per 10 s with some 40 runs of two users waiting let through about half of
it, with stretches of 20 s in which nothing passed), driven deterministically on every
store (the memory one, the database, Redis when REDIS_URL is set) by tests/limits/
simulation.py: each simulated run comes back exactly when its timer says."""

from runs.durable.policies import limits as lim
from tests.limits.simulation import Simulation


def crowd(sim: Simulation, alice: int, bob: int, calls: int) -> None:
    """Alice's runs come first, Bob's a second later: both users wait on the limit and
    take turns, the case where the waiters' order keeps changing."""
    for i in range(alice):
        sim.launch(f"alice-{i}", "alice", calls, at=0.01 * i)
    for i in range(bob):
        sim.launch(f"bob-{i}", "bob", calls, at=1.0 + 0.01 * i)


def assert_cheap(sim: Simulation) -> None:
    """Held runs are not polled: a run comes back to be held again for one call in four
    at most, and a call moves two timers at most (one UPDATE of a run row each)."""
    assert sim.early <= len(sim.calls) // 4, sim.early
    assert sim.wakes <= 2 * len(sim.calls), sim.wakes


def test_a_rate_limit_with_forty_runs_waiting_passes_its_rate_in_every_window(limit_store):
    rule = lim.LimitRule("llm", requests=10, per=10.0)
    sim = Simulation(limit_store, rule, duration=0.2)
    crowd(sim, alice=35, bob=15, calls=2)  # 10 let through at once, 40 wait
    sim.run_all()
    assert len(sim.calls) == 100
    counts = sim.per_window()
    assert len(counts) >= 8
    assert min(counts) >= 9, counts  # 90% of the rate, in every window while work waited
    assert max(counts) <= 10, counts
    assert_cheap(sim)


def test_a_concurrency_limit_keeps_its_slots_busy_while_work_waits(limit_store):
    rule = lim.LimitRule("llm", concurrency=2)
    sim = Simulation(limit_store, rule, duration=1.0)
    crowd(sim, alice=30, bob=12, calls=2)  # 2 in flight, 40 wait
    sim.run_all()
    assert len(sim.calls) == 84
    assert sim.busy() >= 0.9, sim.busy()
    starts = sorted(sim.calls)
    assert all(sum(s <= at < e for s, e in starts) <= 2 for at, _ in starts)
    assert_cheap(sim)


def test_a_tokens_limit_passes_its_tokens_in_every_window_and_no_more(limit_store):
    """Calls in flight count at the largest call seen: the crowd does not all go at
    once while the first calls' tokens are unknown (the old rule let 3,800 tokens
    through in the first window of a 1,000 limit)."""
    rule = lim.LimitRule("llm", tokens=1000, per=10.0)
    sim = Simulation(limit_store, rule, duration=0.2, tokens=100)
    crowd(sim, alice=35, bob=15, calls=2)
    sim.run_all()
    assert len(sim.calls) == 100
    counts = sim.per_window()  # calls of 100 tokens
    assert len(counts) >= 8
    assert min(counts) >= 9 and max(counts) <= 10, counts
    assert_cheap(sim)


def test_a_waiter_that_never_comes_back_costs_its_slot_a_few_seconds_only(limit_store):
    """Two of the first runs to wait are cancelled while they wait: the slots kept for
    them go to the runs behind them `HEAD_GRACE` after they were due."""
    rule = lim.LimitRule("llm", requests=10, per=10.0)
    sim = Simulation(limit_store, rule, duration=0.2,
                     never_back=frozenset({"alice-10", "bob-0"}))
    crowd(sim, alice=35, bob=15, calls=2)
    sim.run_all()
    assert len(sim.calls) == 96  # the two cancelled runs made none of their calls
    counts = sim.per_window()
    assert min(counts) >= 9, counts
