"""The stall rule (runs/worker/stalls.py) on each case, and the same rule as a database filter."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest

from runs.durable import Agent, agent
from runs.models import Run
from runs.worker import stalls

NOW = datetime(2026, 12, 1, 12, 10, 0, tzinfo=dt_timezone.utc)
LIMITS = stalls.Limits(lease_grace=timedelta(seconds=4), unclaimed=timedelta(seconds=60),
                       default_cadence=timedelta(seconds=60),
                       cadences={"slowpoke": timedelta(seconds=600)})
OWNER = "web-1:4242:ab12cd34"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def run(status="running", agent="ticker", owner=OWNER, expires=5.0, moved=1.0, **extra) -> Run:
    """A run row; `expires` is seconds from NOW (negative: in the past), `moved` seconds ago."""
    return Run(id=uuid.uuid4().hex, agent=agent, agent_version="1", status=status,
               lease_owner=owner, lease_expires_at=None if expires is None else
               NOW + timedelta(seconds=expires), updated_at=ago(moved), created_at=ago(3600),
               **extra)


CASES = {
    # name: (run, expected kind or None)
    "running and moving": (run(), None),
    "lease just ran out (inside the grace)": (run(expires=-3.9, moved=6), None),
    "lease ran out more than a lease period ago": (run(expires=-4.5, moved=9), stalls.LEASE_LOST),
    "queued, claimed, lease ran out long ago": (run(status="queued", expires=-30, moved=40),
                                                 stalls.LEASE_LOST),
    "held and renewed, silent past the cadence": (run(moved=300), stalls.SILENT),
    "held and renewed, silent inside the cadence": (run(moved=59), None),
    "an agent that declares a long cadence": (run(agent="slowpoke", moved=300), None),
    "... past its own cadence": (run(agent="slowpoke", moved=601), stalls.SILENT),
    "queued a moment": (run(status="queued", owner=None, expires=None, moved=10), None),
    "queued past the unclaimed limit": (run(status="queued", owner=None, expires=None, moved=61),
                                        stalls.UNCLAIMED),
    "queued, claimed, lease valid (a claim that has not written yet)":
        (run(status="queued", moved=600), None),
    "running with nobody holding it": (run(owner=None, expires=None, moved=5), stalls.UNCLAIMED),
    # a timer (a sleep, a durable retry) that is due is as good as queued
    "waiting on a timer not yet due": (run(status="waiting", owner=None, expires=None,
                                           moved=9999, wake_at=NOW + timedelta(seconds=600)),
                                       None),
    "waiting on a timer due a moment ago": (run(status="waiting", owner=None, expires=None,
                                                moved=9999, wake_at=ago(10)), None),
    "waiting on a timer due past the unclaimed limit, unclaimed":
        (run(status="waiting", owner=None, expires=None, moved=9999, wake_at=ago(61)),
         stalls.UNCLAIMED),
    "waiting on a due timer whose claimer died before writing": (
        run(status="waiting", expires=-30, moved=40, wake_at=ago(41)), stalls.LEASE_LOST),
    "waiting on a due timer, just claimed": (run(status="waiting", moved=1, wake_at=ago(90)),
                                             None),
    # never stalled, however old and unheld
    "waiting for input": (run(status="waiting", owner=None, expires=None, moved=9999,
                              attention={"kind": "input"}), None),
    "paused": (run(status="paused", owner=None, expires=None, moved=9999), None),
    "needs attention": (run(status="needs_attention", expires=-9000, moved=9999), None),
    "succeeded": (run(status="succeeded", expires=-9000, moved=9999), None),
    "failed": (run(status="failed", owner=None, expires=None, moved=9999), None),
    "cancelled": (run(status="cancelled", expires=-9000, moved=9999), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_rule_on_each_case(name):
    row, expected = CASES[name]
    stall = stalls.stall_of(row, NOW, LIMITS)
    assert (stall.kind if stall else None) == expected


def test_it_says_why_and_since_when():
    lost = stalls.stall_of(run(expires=-30, moved=40), NOW, LIMITS)
    assert lost.since == NOW - timedelta(seconds=30)
    assert lost.why == "lease holder web-1:4242 gone: its lease ran out and no worker took the " \
                       "run over"
    silent = stalls.stall_of(run(moved=300), NOW, LIMITS)
    assert silent.since == ago(300)
    assert silent.why == "no progress for 5 min, expected every 60 s (held by web-1:4242)"
    queued = stalls.stall_of(run(status="queued", owner=None, expires=None, moved=80), NOW, LIMITS)
    assert (queued.since, queued.why) == (ago(80), "queued 80 s, no worker claimed it")
    assert queued.as_dict() == {"kind": "unclaimed", "since": ago(80).isoformat(),
                                "why": "queued 80 s, no worker claimed it"}
    due = stalls.stall_of(run(status="waiting", owner=None, expires=None, moved=9000,
                              wake_at=ago(90)), NOW, LIMITS)
    assert (due.since, due.why) == (ago(90), "timer due 90 s ago, no worker claimed it")


def test_a_values_row_gives_the_same_answer_as_the_model():
    row = run(moved=300)
    as_dict = {name: getattr(row, name) for name in stalls.FIELDS}
    assert stalls.stall_of(as_dict, NOW, LIMITS) == stalls.stall_of(row, NOW, LIMITS)


@pytest.mark.django_db
def test_the_filter_selects_exactly_the_runs_the_rule_calls_stalled():
    rows = {name: row for name, (row, _) in CASES.items()}
    Run.objects.bulk_create(rows.values())
    found = set(Run.objects.filter(stalls.stalled_q(NOW, LIMITS)).values_list("pk", flat=True))
    expected = {row.pk for name, row in rows.items() if CASES[name][1] is not None}
    assert found == expected
    for kind in stalls.KINDS:
        found = set(Run.objects.filter(stalls.stalled_q(NOW, LIMITS, kind))
                    .values_list("pk", flat=True))
        assert found == {row.pk for name, row in rows.items() if CASES[name][1] == kind}, kind


@agent("stall-slowpoke", expected_cadence=600)
def slowpoke(ctx, inputs):
    return None


def test_the_agent_attribute_and_the_site_default_feed_the_limits(settings):
    settings.AGENTOPS = {**settings.AGENTOPS, "EXPECTED_CADENCE_SECONDS": 120.0}
    within = stalls.limits()
    assert within.cadence("stall-slowpoke") == timedelta(seconds=600)
    assert within.cadence("ticker") == timedelta(seconds=120)  # declares none: the site's
    assert Agent.expected_cadence is None
