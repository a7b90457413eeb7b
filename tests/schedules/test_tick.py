"""The schedules' clock driven by an explicit `now`: minutes of schedule in no time.

A launched run "lasts 90 s" on that clock: the test ends it (as its worker would) once
the clock has passed its launch by 90 s, before the tick at that time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import close_old_connections, connection

import tests.workload_agents  # noqa: F401  (the ticker agent)
from runs.durable import records as r
from runs.models import Run
from runs.schedules import services
from runs.schedules.models import Schedule, ScheduleLaunch
from runs.schedules.tick import tick

T0 = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)


def minute(m: int, s: int = 0) -> datetime:
    return datetime(2026, 3, 2, 12, m, s, tzinfo=UTC)


def make(user, **data) -> Schedule:
    base = {"name": "every minute", "agent": "ticker", "inputs": {"steps": 1},
            "kind": "cron", "cron": "* * * * *", "overlap": "skip"}
    return services.schedule_create(user=user, data={**base, **data}, now=T0)


def drive(schedule, until: datetime, *, lasts: float = 90.0, every: float = 10.0):
    """Tick every `every` seconds of the fake clock; a run ends `lasts` s after its launch."""
    started: dict[str, datetime] = {}
    now = T0
    while now <= until:
        for run_id, at in list(started.items()):
            if now >= at + timedelta(seconds=lasts):
                Run.objects.filter(pk=run_id).update(status=r.SUCCEEDED, finished_at=now)
                del started[run_id]
        for launch in tick(now):
            if launch.run_id:
                started[launch.run_id] = now
        now += timedelta(seconds=every)


def outcomes(schedule):
    return [(row.slot_at, row.outcome) for row in
            ScheduleLaunch.objects.filter(schedule=schedule).order_by("created_at", "pk")]


@pytest.mark.django_db
def test_a_one_minute_schedule_with_skip_and_a_90_s_run_launches_every_other_minute(users):
    schedule = make(users["alice"], overlap="skip")
    assert schedule.next_at == minute(1)
    drive(schedule, minute(7, 50))
    assert outcomes(schedule) == [
        (minute(1), "launched"), (minute(2), "skipped"), (minute(3), "launched"),
        (minute(4), "skipped"), (minute(5), "launched"), (minute(6), "skipped"),
        (minute(7), "launched")]
    runs = Run.objects.filter(schedule_launch__schedule=schedule)
    assert runs.count() == 4
    assert {run.owner_id for run in runs} == {users["alice"].pk}
    assert {run.inputs["steps"] for run in runs} == {1}


@pytest.mark.django_db
def test_queue_launches_a_slot_that_came_while_busy_once_the_run_ends(users):
    schedule = make(users["alice"], overlap="queue")
    drive(schedule, minute(5, 50))
    assert outcomes(schedule) == [
        (minute(1), "launched"),
        (minute(2), "queued"), (minute(2), "launched"),    # at 12:02:30, when the first ended
        (minute(3), "queued"), (minute(3), "launched"),    # at 12:04:00
        (minute(4), "queued"),
        (minute(5), "skipped"),                            # one slot waits, at most
        (minute(4), "launched"),                           # at 12:05:30
    ]
    launched = ScheduleLaunch.objects.filter(schedule=schedule, outcome="launched")
    assert [row.created_at for row in launched.order_by("pk")]  # rows exist for each


@pytest.mark.django_db
def test_allow_launches_at_every_slot_even_while_runs_overlap(users):
    schedule = make(users["alice"], overlap="allow")
    drive(schedule, minute(5, 50))
    assert outcomes(schedule) == [(minute(m), "launched") for m in range(1, 6)]


@pytest.mark.django_db
def test_after_downtime_the_missed_slots_are_one_launch(users):
    schedule = make(users["alice"], kind="interval", cron="", interval_seconds=60,
                    overlap="allow")
    assert schedule.next_at == T0 + timedelta(seconds=60)
    back = T0 + timedelta(minutes=10, seconds=45)  # nobody ticked for ten minutes
    launches = tick(back)
    assert [(row.outcome, row.missed) for row in launches] == [("launched", 9)]
    assert launches[0].slot_at == T0 + timedelta(minutes=10)
    schedule.refresh_from_db()
    assert schedule.next_at == T0 + timedelta(minutes=11)
    assert tick(back + timedelta(seconds=5)) == []


@pytest.mark.django_db
def test_a_paused_schedule_launches_nothing_and_resumes_from_now(users):
    schedule = make(users["alice"])
    services.schedule_set_paused(schedule=schedule, paused=True, now=T0)
    assert tick(minute(30)) == []
    schedule = services.schedule_set_paused(schedule=schedule, paused=False, now=minute(30, 5))
    assert schedule.next_at == minute(31)  # the paused half hour is not caught up
    assert [row.outcome for row in tick(minute(31))] == ["launched"]


@pytest.mark.django_db
def test_a_launch_that_the_agent_refuses_is_recorded_and_the_schedule_goes_on(users):
    schedule = make(users["alice"])
    # the agent's schema changed since the schedule was saved: its inputs no longer fit
    Schedule.objects.filter(pk=schedule.pk).update(inputs={"steps": "many"})
    [launch] = tick(minute(1))
    assert launch.outcome == "failed" and "steps" in launch.detail and launch.run_id is None
    assert [row.outcome for row in tick(minute(2))] == ["failed"]


@pytest.mark.django_db(transaction=True)
def test_two_clusters_ticking_at_once_launch_each_slot_once(users):
    """Two threads, each with its own database connection, tick the same clock."""
    schedules = [make(users["alice"], name=f"s{i}", overlap="allow") for i in range(5)]
    barrier = threading.Barrier(2)
    errors = []

    def cluster():
        try:
            for m in range(1, 11):
                barrier.wait(timeout=30)
                tick(minute(m))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=cluster) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        # ten rounds of five launches a tick; a thread stuck in one ends the other's wait at
        # the barrier's 30 s with an error (reported below): this outlasts that
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a tick never returned"
    assert not errors
    for schedule in schedules:
        slots = list(ScheduleLaunch.objects.filter(schedule=schedule, outcome="launched")
                     .values_list("slot_at", flat=True).order_by("slot_at"))
        assert slots == [minute(m) for m in range(1, 11)], schedule.name
    assert Run.objects.count() == 50
