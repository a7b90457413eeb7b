"""The duties of a tree's main (runs/worker/sweep.py). The lease rule: a lease held by a
process of this host that no longer exists is expired at once (through the store), one
held by a live process is left alone. Checkpoint retention, and the features' side jobs
through their hooks (runs/hooks.py)."""

import os
import socket
import subprocess
import threading
import time

import pytest

from runs import services
from runs.hooks import hooks
from runs.worker import side_jobs, sweep
from runs.worker.execute import store
from runs.worker.sweep import expire_dead_local_leases
from tests.support.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_dead_local_workers_lease_expires_and_a_live_ones_holds():
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    host = socket.gethostname()
    owners = {"dead": f"{host}:{gone.pid}:1", "alive": f"{host}:{os.getpid()}:1",
              "elsewhere": f"another-host-{host}:{gone.pid}:1"}
    runs = {name: services.run_launch(user=None, agent="steps", inputs={"n": 1}).id
            for name in owners}
    now = time.time()
    for name, owner in owners.items():
        assert store().claim(runs[name], owner, 600, now) is not None
    assert expire_dead_local_leases() == 1
    due = store().due_runs(time.time() + 0.01)
    assert runs["dead"] in due
    assert runs["alive"] not in due and runs["elsewhere"] not in due
    assert expire_dead_local_leases() == 0  # nothing left to expire


def test_the_workers_store_passes_on_every_method_of_the_protocol():
    from runs.durable.store import Store
    from runs.worker.db import ReleasingStore

    protocol = {name for name in vars(Store) if not name.startswith("_")}
    assert protocol and protocol <= set(vars(ReleasingStore))


def test_the_main_prunes_checkpoints_in_a_thread_once_an_interval(settings, monkeypatch):
    """Retention of checkpoints, events and effects (runs/storage/retention.py, apply) is
    a duty of each tree's main, once
    every RETENTION_INTERVAL_SECONDS (the first at a random moment of the first interval),
    in a thread of its own, one at a time."""
    settings.AGENTOPS = {**settings.AGENTOPS, "RETENTION_INTERVAL_SECONDS": 0.2}
    pruned = []
    monkeypatch.setattr(sweep, "apply_retention",
                        lambda: pruned.append(threading.current_thread().name))
    duties = sweep.Duties()

    def pruned_twice():
        duties.retention()
        return len(pruned) >= 2

    started = time.monotonic()
    wait_until(pruned_twice, 10, message="two prunes")
    assert pruned[:2] == ["retention", "retention"]
    assert time.monotonic() - started >= 0.2  # once an interval, not at every tick


def test_a_side_job_that_fails_does_not_hold_up_the_others(monkeypatch):
    ran = []

    def broken():
        raise RuntimeError("a bug in a feature")

    monkeypatch.setattr(hooks, "side_jobs", [broken, lambda: ran.append("next")])
    side_jobs.tick()
    assert ran == ["next"]


def test_the_features_fill_the_hooks_the_worker_calls():
    """The worker imports no feature: chat, budgets, schedules and webhooks register
    themselves in their AppConfig.ready() (runs/hooks.py)."""
    from runs.budgets.gates import worker_gates
    from runs.budgets.prices import price
    from runs.chat.services import deliver_queued
    from runs.schedules.tick import tick
    from runs.webhooks.dispatch import dispatch
    from runs.worker.config import worker_config

    assert deliver_queued in hooks.input_wait
    assert worker_gates in hooks.worker_gates and hooks.price is price
    assert {tick, dispatch} <= set(hooks.side_jobs)
    config = worker_config()
    assert config.price is price
    assert [type(g) for g in config.gates] == [type(g) for g in worker_gates()]
