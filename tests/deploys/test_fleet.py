"""How soon a worker of new code learns that the tree of the old code stopped
(runs/worker/fleet.py): at its next poll for due runs, not when its read of the
heartbeats has aged. No clock moves in these tests: the fleet's is frozen."""

from __future__ import annotations

import time
import types

import pytest

from runs.durable import versions
from runs.models import WorkerHeartbeat
from runs.storage import clock
from runs.worker import execute, fleet

from .conftest import REG, REG_V2, handed_off, launch


@pytest.fixture
def frozen_fleet(monkeypatch):
    """The fleet's cache, empty, on a clock that never moves; and the database clock's
    offset measured once, on a clock that never moves either: its next measure, due 30 s
    of this process's time after the last (runs/storage/clock.py), is a query of its own,
    and a loaded CI counted it inside a test's one query."""
    monkeypatch.setattr(fleet, "_cache", {"at": -1e9, "live": None})
    monkeypatch.setattr(fleet, "time", types.SimpleNamespace(monotonic=lambda: 1000.0))
    clock.offset()
    measured = time.monotonic()
    monkeypatch.setattr(clock, "time", types.SimpleNamespace(monotonic=lambda: measured,
                                                             time=time.time))


def tree(host: str, codes: dict) -> WorkerHeartbeat:
    return WorkerHeartbeat.objects.create(host=host, pid=1, codes=codes)


@pytest.mark.django_db(transaction=True)
def test_a_poll_takes_over_the_runs_of_a_tree_that_stopped_at_once(frozen_fleet,
                                                                   code_on_disk):
    run_id = handed_off(launch())  # queued on v1, handed back by its tree
    old = tree("old-tree", versions.codes_of([REG.agents["writer"]]))
    code_on_disk(REG_V2)  # this worker: v2, beside the old tree
    assert execute._due_runs([], 5) == []  # v1's tree is alive: the run is pinned to it
    old.stopping = True  # the deploy stops it
    old.save()
    assert execute._due_runs([], 5) == [run_id]


@pytest.mark.django_db(transaction=True)
def test_without_another_code_of_its_agents_a_poll_keeps_its_read(frozen_fleet, code_on_disk,
                                                                  django_assert_num_queries):
    code_on_disk(REG_V2)
    tree("this-tree", fleet.own_codes())
    with django_assert_num_queries(1):
        first = fleet.worker_codes(polling=True)
    with django_assert_num_queries(0):
        assert fleet.worker_codes(polling=True) == first
    assert first.taken == frozenset()


@pytest.mark.django_db
def test_every_run_of_a_worker_shares_one_codes_until_the_fleet_changes(frozen_fleet):
    # Each held run's config holds the worker's Codes: one object for all of them, not
    # three sets per run (1,000 runs: ~1.8 MiB), and a new one once a live tree changes.
    first = fleet.worker_codes()
    assert fleet.worker_codes() is first
    tree("other-tree", {"0123456789abcdef": {"agent": "someone-else", "version": "1",
                                             "upgrade": "pin"}})
    fleet._cache["at"] = -1e9  # the next call reads the heartbeats again
    assert fleet.worker_codes() is first  # another agent's code: the same Codes
    mine = next(iter(fleet.own_codes().values()))
    tree("newer-tree", {"fedcba9876543210": dict(mine, version="99")})
    fleet._cache["at"] = -1e9
    changed = fleet.worker_codes()
    assert changed is not first and changed.taken == {"fedcba9876543210"}
    assert fleet.worker_codes() is changed
