"""The sentinel's watchdog: work that waits while every worker is idle, for longer than
its patience, and only then."""

from runs.worker.cluster.watchdog import Watchdog


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def no_backlog():
    return 0


def test_tasks_in_the_local_queue_with_every_worker_idle_end_the_generation_after_patience():
    clock = Clock()
    dog = Watchdog(3.0, clock)
    assert dog.check(True, 1, no_backlog) is None
    clock.now = 2.9
    assert dog.check(True, 1, no_backlog) is None
    clock.now = 3.1
    assert "local queue" in dog.check(True, 1, no_backlog)
    assert dog.check(True, 1, no_backlog) is None  # it starts counting again


def test_a_busy_worker_or_a_queue_taken_in_time_resets_the_count():
    clock = Clock()
    dog = Watchdog(3.0, clock)
    dog.check(True, 1, no_backlog)
    clock.now = 2.0
    assert dog.check(False, 1, no_backlog) is None  # a worker took it
    clock.now = 4.0
    assert dog.check(True, 1, no_backlog) is None   # a new wait, not 4 s of one
    clock.now = 7.5
    assert dog.check(True, 1, no_backlog) is not None


def test_a_broker_backlog_counts_only_when_the_local_queue_is_empty_and_workers_idle():
    clock = Clock()
    dog = Watchdog(1.0, clock)
    asked = []

    def backlog():
        asked.append(1)
        return 2

    assert dog.check(False, 0, backlog) is None and not asked
    assert dog.check(True, 0, backlog) is None and asked
    clock.now = 1.5
    assert "broker" in dog.check(True, 0, backlog)
    clock.now = 5.0
    assert dog.check(True, 0, no_backlog) is None
