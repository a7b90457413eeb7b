"""The outside world goes away for minutes in the middle of `crawl`, `migrate` and
`assistant` runs (real worker trees, the sandbox in its own Daphne, killed and
started again). The runs wait it out on durable timers: no worker slot is held
while they wait, every worker process is killed (SIGKILL) and replaced halfway
through, and after the sandbox is back all three succeed with nothing reaching
the target twice and no page marked failed for being unreachable.

OUTAGE_SECONDS sets the outage (default 120). The workers' longest wait between
attempts is cut to 5 s (AGENTOPS_TOOL_RETRY_MAX_INTERVAL) so the runs notice the
sandbox's return within seconds, not the production default's 30.
"""

import os
import signal
import time
from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from runs import services
from runs.models import Run, RunEvent
from runs.operator.selectors import workers_overview
from sandbox import site
from sandbox.models import Notification
from tests.crash.helpers import assert_consistent, assert_outside_world_clean, wait_final
from tests.support.processes import TREE_DEADLINE, Server, free_port, wait_until

OUTAGE_SECONDS = float(os.environ.get("OUTAGE_SECONDS", "120"))
MAX_INTERVAL = 5
CRAWL_PAGES = 300

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(OUTAGE_SECONDS + 300)]


def launch_all(sandbox: str) -> dict[str, str]:
    inputs = {
        "crawl": {"site_url": f"{sandbox}/site", "pages": CRAWL_PAGES, "latency_ms": 40, "batch": 5,
                  "error_rate": 0.02},
        "migrate": {"source_url": f"{sandbox}/dataset/rows", "target_url": f"{sandbox}/api",
                    "rows": 20_000, "batch_size": 100, "seed": 3},
        "assistant": {"base_url": f"{sandbox}/llm/v1", "model": "scripted", "chat": False,
                      "site_url": f"{sandbox}/site", "target_url": f"{sandbox}/api",
                      "site_pages": 200, "search_scan": 100, "latency_ms": 40,
                      "follow_ups": ["And how many mention the river?",
                                     "Which page mentions a boat first?",
                                     "Sum the two counts."]},
    }
    return {name: services.run_launch(user=None, agent=name, inputs=values).id
            for name, values in inputs.items()}


def done_effects(run_id: str) -> int:
    return RunEvent.objects.filter(run_id=run_id, kind="effect", data__status="done").count()


def slots_held() -> int:
    """What the workers page shows: the runs each worker process holds."""
    return sum(len(process.runs) for host in workers_overview()["hosts"].values()
               for process in host["processes"])


def waiting_and_held(run_ids) -> tuple[bool, int]:
    """From one statement (one snapshot): are all the runs waiting to retry, with their
    next attempt not yet due, and how many runs do workers hold?"""
    rows = list(Run.objects.filter(Q(pk__in=run_ids) | Q(lease_owner__isnull=False))
                .values("id", "status", "attention", "lease_owner", "wake_at"))
    soon = timezone.now() + timedelta(seconds=0.2)
    mine = [row for row in rows if row["id"] in run_ids]
    waiting = len(mine) == len(run_ids) and all(
        row["status"] == "waiting" and (row["attention"] or {}).get("kind") == "retry"
        and row["wake_at"] is not None and row["wake_at"] > soon for row in mine)
    return waiting, sum(1 for row in rows if row["lease_owner"])


def test_a_sandbox_outage_of_minutes_is_waited_out_without_holding_a_slot(tmp_path,
                                                                          start_cluster):
    port = free_port()
    sandbox = Server(tmp_path, port=port)
    try:
        url = f"{sandbox.url}/sandbox"
        runs = launch_all(url)
        run_ids = list(runs.values())
        env = {"AGENTOPS_SANDBOX_URL": url, "AGENTOPS_TOOL_RETRY_MAX_INTERVAL": MAX_INTERVAL}
        cluster = start_cluster(workers=2, **env)
        wait_until(lambda: all(done_effects(i) >= 2 for i in run_ids), TREE_DEADLINE,
                   message="every run under way")
        sandbox.signal_group(signal.SIGKILL)  # the outside world is gone, mid-request
        sandbox.stop()
        assert not Run.objects.filter(pk__in=run_ids, status__in=["succeeded", "failed"]) \
            .exists(), "a run ended before the outage could reach it"

        outage_ends = time.monotonic() + OUTAGE_SECONDS
        all_waiting = shown_idle = 0
        redeploy_at = time.monotonic() + OUTAGE_SECONDS / 2
        while time.monotonic() < outage_ends:
            if redeploy_at and time.monotonic() >= redeploy_at:
                # The timers are in the database: a crash of every worker process in the
                # middle of the outage, and a new cluster in its place, lose nothing.
                cluster.signal_group(signal.SIGKILL)
                cluster = start_cluster(workers=2, name="after-crash", **env)
                redeploy_at = None
            waiting, held = waiting_and_held(run_ids)
            if waiting:
                assert held == 0, f"{held} slot(s) held while every run waits to retry"
                all_waiting += 1
                shown_idle += slots_held() == 0  # a run may wake between the two reads
            assert not Run.objects.filter(pk__in=run_ids).exclude(
                status__in=["running", "waiting", "queued"]).exists(), \
                list(Run.objects.filter(pk__in=run_ids).values("agent", "status", "error"))
            time.sleep(0.5)
        assert all_waiting >= 3, "the runs were never seen all waiting at once"
        assert shown_idle >= 1, "the workers page never showed the slots free"

        sandbox = Server(tmp_path, port=port)  # back, at the same address
        # Nearly all the runs' work is still to do (a crawl of 300 pages, 200 batches of
        # rows, the assistant's searches of a 200-page site; pages at 40 ms each), once
        # their retry timers (up to 5 s apart) find the sandbox back.
        finished = wait_final(run_ids, timeout=240)
    finally:
        sandbox.stop()

    for name, run_id in runs.items():
        run = finished[run_id]
        assert run.status == "succeeded", (name, run.status, run.error, run.attention)
        assert_consistent(run)
        waits = RunEvent.objects.filter(run_id=run_id, kind="status", data__kind="retry")
        assert waits.count() >= 3, f"{name} did not wait durably through the outage"
        # Every failed attempt is an event; the outage cost many for each run.
        assert RunEvent.objects.filter(run_id=run_id, kind="attempt").count() >= 5, name
    assert_outside_world_clean(run_ids)
    assert Notification.objects.filter(unit=f"{runs['migrate']}-cutover").count() == 1

    report = finished[runs["crawl"]].output
    expected = site.expected_crawl(CRAWL_PAGES)
    # Failed pages are the site's broken (404) pages, none that was merely unreachable.
    assert report["pages"] == {"discovered": len(expected.reachable),
                               "fetched": len(expected.fetched_ok),
                               "failed": len(expected.broken)}
    assert {f["page"] for f in report["failures"]} == expected.broken
    assert all("HTTP 404" in f["error"] for f in report["failures"]), report["failures"]
    migrated = finished[runs["migrate"]].output
    assert (migrated["rows"], migrated["cut_over"]) == (20_000, True)
    assert migrated["verified"]["duplicate_units"] == []
    assert len(finished[runs["assistant"]].output["answers"]) == 4
