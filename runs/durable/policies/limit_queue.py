"""The queue of a shared limit (runs/durable/policies/limits.py): in what order its waiters get
the slots, when each slot opens, and when each waiter's run must be back for its own.

A held run waits as a durable timer: it holds no worker, and nothing runs for it until
its timer fires. So the limit keeps, for every waiter, the time its run was told to come
back (`due`), and after every change of the limit's state (a call let through, a call
ended, a waiter queued, a Retry-After) it plans the queue again:

  * the order: a round robin over users. Each user's waiters go in the order they first
    asked; the next slot goes to the user served least recently, counting the slots
    planned before it, so two busy users alternate and Bob's one run goes before the
    next of Alice's 500.
  * the openings: when each of the next calls may start. A slot free now opens now; a
    call in the window leaves it `per` after it ended; a call in flight frees its
    concurrency slot when it ends; tokens leave the window `per` after their call ended
    (and calls in flight count at an estimate). A call in flight has no known end: the
    slot it holds is given the latest time it can open (from its lease), a bound and
    not a sure time, made sure when the call ends (`finish` plans again).
  * the wake-ups: a waiter whose slot surely opens earlier than its run was told is
    woken (`Wake`: the gate moves its run's timer earlier), at once if its slot is free
    now. A timer is never moved later, nor to a bound: a run told too early comes
    back, finds its slot not yet there and is told again.

A slot free now is kept for the waiter it was planned for while its run is on its way.
A waiter not back `HEAD_GRACE` after it was due (its run cancelled, paused, or its
wake-up lost) is passed over: the slot goes to the next one, and a run that does come
back later keeps its place in the queue. Nothing runs at the moment a waiter is passed
over, so the waiter after the first gap of more than `HEAD_GRACE` in the plan is told to
come back by the end of that grace at the latest: if those before it came, it finds its
slot not yet open and waits again (one early wake-up); if one did not, it takes the slot.
A passed-over waiter is woken once more (a wake-up may have been lost to a race with its
run's own hold), and leaves the queue `WAITER_GRACE` after it was due.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_GRACE = 3.0       # seconds a slot is kept for a waiter past its due (claim latency)
WAITER_GRACE = 30.0    # seconds past its due after which a waiter that never came is dropped
MIN_WAIT = 0.05        # a held call is told to come back no sooner than this
EARLIER = 0.001        # a due moved by less is not worth a wake-up


@dataclass(frozen=True)
class Wake:
    """Move the timer of held run `run` to `at`, if it is later."""

    run: str
    at: float


def passed_over(waiter: dict, now: float) -> bool:
    return now >= waiter["due"] + HEAD_GRACE


def turns(waiters: dict, served: dict) -> list[str]:
    """The waiters' keys in the order they get slots: a round robin over users, the
    user served least recently first, each user's waiters in the order they came."""
    queues: dict[str, list] = {}
    for key, waiter in waiters.items():
        queues.setdefault(waiter["user"], []).append((waiter["since"], key))
    for queue in queues.values():
        queue.sort()
    active = sorted(queues, key=lambda user: (served.get(user, 0.0), *queues[user][0]))
    order: list[str] = []
    turn = 0
    while active:
        order.extend(queues[user][turn][1] for user in active)
        turn += 1
        active = [user for user in active if len(queues[user]) > turn]
    return order


def openings(rule, state: dict, now: float, n: int) -> list[tuple[float, bool]]:
    """When each of the next `n` calls may start, earliest first, and whether that time
    is sure (`firm`) or a bound: a call in flight is taken to end at its lease expiry,
    and a call not yet made to hold its slot its whole lease."""
    grants, per_rule = state["grants"], []
    if rule.requests is not None:
        leaves = sorted((g["until"] + rule.per, g["done"]) for g in grants)
        per_rule.append(_slots(rule.requests, leaves, now, n, rule.lease + rule.per))
    if rule.concurrency is not None:
        ends = sorted((g["until"], False) for g in grants if not g["done"] and g["until"] > now)
        per_rule.append(_slots(rule.concurrency, ends, now, n, rule.lease))
    if rule.tokens is not None:
        per_rule.append(_token_slots(rule, state, now, n))
    # the j-th call may start once every rule allows it: the latest of their times
    times = [(max(now, state["closed_until"]), True)] * n
    for slots in per_rule:
        times = [b if b[0] > a[0] else (a if a[0] > b[0] or a[1] else b)
                 for a, b in zip(times, slots)]
    return times


def _slots(capacity: int, frees: list[tuple[float, bool]], now: float, n: int,
           cycle: float) -> list[tuple[float, bool]]:
    """When each of the next `n` calls may start under `capacity` slots, held until the
    sorted times `frees`; a call still to be made holds its slot at most `cycle`."""
    times: list[tuple[float, bool]] = []
    over = len(frees) - capacity
    for j in range(n):
        index = over + j
        if index < 0:
            times.append((now, True))
        elif index < len(frees):
            times.append(frees[index])
        else:
            times.append((times[j - capacity][0] + cycle, False))
    return times


def _token_slots(rule, state: dict, now: float, n: int) -> list[tuple[float, bool]]:
    """Tokens: a call's are known once it ended, so the calls in flight count at an
    estimate, the largest call of the limit seen (`largest`). Once the window is under
    the limit, calls start while what it used, the estimates of the calls in flight and
    their own stay within it; with none in flight one call always may (the one that
    may cross the limit), and a call of unknown size goes alone."""
    grants, largest = state["grants"], state.get("largest")
    in_flight = [g["until"] for g in grants if not g["done"] and g["until"] > now]
    under_at, used = _tokens_under(rule, grants, now)
    fits = _calls_that_fit(rule.tokens - used, len(in_flight), largest, n)
    # The others wait for calls in flight to end (their leases at the latest), then for
    # the window to empty, a window's worth of calls at a time.
    bound = max([under_at, *in_flight]) + rule.per
    per_window = max(1, rule.tokens // largest) if largest else 1
    return [(under_at, True)] * fits + [
        (bound + (j // per_window) * (rule.lease + rule.per), False) for j in range(n - fits)]


def _tokens_under(rule, grants: list, now: float) -> tuple[float, int]:
    """When the window's tokens are under the limit again, and how many it holds then."""
    used = sum(g["tokens"] for g in grants)
    for until, tokens in sorted((g["until"], g["tokens"]) for g in grants if g["tokens"]):
        if used < rule.tokens:
            break
        used -= tokens
        now = max(now, until + rule.per)
    return now, used


def _calls_that_fit(room: int, in_flight: int, largest: int | None, n: int) -> int:
    if largest is None:  # no call of this limit has ended yet: its size is unknown
        return min(n, 1 if in_flight == 0 else 0)
    if largest == 0:
        return n
    return min(n, max(room // largest - in_flight, 1 if in_flight == 0 else 0))


def plan(rule, state: dict, now: float) -> tuple[list[str], list[tuple[float, bool]]]:
    """The waiters not passed over, in the order they get slots, and when each one's
    slot opens (with whether that time is sure)."""
    waiters = state["waiters"]
    queued = {k: w for k, w in waiters.items() if not passed_over(w, now)}
    order = turns(queued, state["served"])
    return order, openings(rule, state, now, len(order))


def reschedule(rule, state: dict, now: float, asking: str | None = None,
               planned: tuple | None = None) -> list[Wake]:
    """Plan the queue again (or take `planned`, the plan of this same state): set the
    due of `asking` (a caller being held) and move the others' earlier where their
    slots now surely open earlier. Returns the runs to wake."""
    waiters = state["waiters"]
    wakes = _pass_over(waiters, now)
    order, times = planned or plan(rule, state, now)
    previous, gap_seen = None, False
    for key, (due, firm) in zip(order, times):
        waiter = waiters[key]
        if not gap_seen and previous is not None and due > previous + HEAD_GRACE:
            # the first gap after a sure slot: cover for a waiter ahead that does not come
            due, firm, gap_seen = previous + HEAD_GRACE, True, True
        if key == asking:
            _set_due(waiter, max(due, now + MIN_WAIT))
        elif firm and due < waiter["due"] - EARLIER:
            _set_due(waiter, due)
            if waiter.get("run"):
                wakes.append(Wake(waiter["run"], due))
        # when this waiter is expected: at its own timer, or at its slot if that is later
        previous = (waiter["due"] if due <= now else max(waiter["due"], due)) if firm else None
    return wakes


def _set_due(waiter: dict, due: float) -> None:
    waiter.update(due=due, expires=due + WAITER_GRACE, rewoken=False)


def _pass_over(waiters: dict, now: float) -> list[Wake]:
    """Waiters not back in time are passed over; each is woken once more, in case the
    wake-up it missed was lost (it raced its run's own hold)."""
    wakes = []
    for waiter in waiters.values():
        if passed_over(waiter, now) and not waiter.get("rewoken"):
            waiter["rewoken"] = True
            if waiter.get("run"):
                wakes.append(Wake(waiter["run"], now))
    return wakes
