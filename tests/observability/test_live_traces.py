"""Traces of a live stack: across a SIGKILL of the worker holding the run, and through a
deploy's SIGTERM.

The run is launched by an HTTP request carrying a W3C traceparent; Daphne and the
workers export over OTLP/HTTP to a collector in this test (tests/support/otlp.py).
The test kills the worker once the run's last step has made its downstream call
(and the earlier steps' spans have been exported), then lets the next worker finish.
One trace, the caller's; the claims of both workers in it; each step's calls as events
of its step's span, the last step's call replayed by the second worker and marked so;
each downstream request carrying its step's span as parent.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from runs import services
from runs.durable import records as r
from runs.models import Effect, Run, RunEvent
from tests.observability.stack import logged_in, post_form, stack_env
from tests.observability.traced_agent import hold_until, post_downstream
from tests.support.otlp import Collector
from tests.support.processes import NO_TIME_SLICES, TREE_DEADLINE, Server, wait_until
from tests.workload_agents import pause_for

pytestmark = pytest.mark.services
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
STEPS = 3


def run_spans(collector, run_id, name=None, **attributes):
    return [s for s in collector.snapshot()
            if s["attributes"].get("agentops.run.id") == run_id
            and (name is None or s["name"] == name)
            and all(s["attributes"].get(k) == v for k, v in attributes.items())]


def effects(span) -> list[tuple]:
    """(tool, replayed, outcome) of each effect event of a step span (`replayed` is
    there only when true, the outcome only when it is not `done`)."""
    return [(e["name"], e["attributes"].get("agentops.effect.replayed", False),
             e["attributes"].get("agentops.effect.outcome", "done")) for e in span["events"]]


def test_one_trace_from_the_launching_request_across_a_sigkill_of_the_worker(
        transactional_db, users, tmp_path, start_cluster):
    collector = Collector()
    # The run's one claim before the kill must not end by any other way (seen on a loaded
    # CI machine, twice: a second, ordinary claim before the kill's takeover); a lease
    # outlasts a starved process's late renewal. The takeover waits for it (15 s).
    env = {**stack_env(tmp_path, collector), **NO_TIME_SLICES, "AGENTOPS_LEASE_SECONDS": 15}
    server = Server(tmp_path, **env)
    try:
        cluster = start_cluster(workers=2, **env)
        release = tmp_path / "release"
        alice = logged_in(server.url, "alice", "alice-pass-1")
        launched = post_form(alice, "/launch/traced/", {
            "steps": str(STEPS), "target": f"{collector.url}/downstream/records",
            "release": str(release)}, headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
        assert launched.status_code == 302, launched.text[:2000]
        run_id = re.search(r"/runs/([0-9a-f]{32})/", launched.headers["location"]).group(1)
        spans = lambda name=None, **attributes: run_spans(collector, run_id, name, **attributes)  # noqa: E731

        # the last step's downstream call is logged: the worker is now inside hold_until;
        # the steps before it have ended and their spans reached the collector
        wait_until(lambda: Effect.objects.filter(run_id=run_id, step_no=STEPS, status=r.DONE,
                                                 tool=post_downstream.name).exists(),
                   TREE_DEADLINE, message="the last step's call logged")
        wait_until(lambda: len(spans("step 2")) == 1, 30, message="the first two steps exported")
        holder = Run.objects.get(pk=run_id).lease_owner
        pid = int(holder.split(":")[1])
        assert pid in cluster.worker_pids()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: (owner := Run.objects.get(pk=run_id).lease_owner) and owner != holder,
                   TREE_DEADLINE, message="another worker to take the run over")
        release.touch()
        wait_until(lambda: Run.objects.get(pk=run_id).status == r.SUCCEEDED, TREE_DEADLINE,
                   message="the run to succeed")
        # the run's end is written before its last step's span leaves the worker, on the
        # exporter's own thread, which CI's loaded cores may keep waiting for a while
        wait_until(lambda: [s for s in spans(f"step {STEPS}")
                            if (hold_until.name, False, "done") in effects(s)], 90,
                   message="the second claim's last step")

        everything = spans()
        assert {s["trace_id"] for s in everything} == {CALLER_TRACE}, "one trace, the caller's"
        [launch] = spans("launch traced")
        request = [s for s in collector.snapshot() if s["span_id"] == launch["parent_id"]]
        assert request and request[0]["name"] == "POST /launch/traced/"
        assert request[0]["parent_id"] == CALLER_SPAN

        claims = sorted(spans("claim traced"), key=lambda s: s["attributes"]["agentops.epoch"])
        # The kill's takeover is the second claim. Should another claim come between it
        # and the one that finished (a tree that ended after the kill hands its runs
        # back), it was not the killed worker's. What ended each claim, for a failure:
        story = ([(c["attributes"].get("agentops.epoch"), c["attributes"].get("agentops.worker"),
                   c["attributes"].get("agentops.takeover")) for c in claims],
                 [(e.seq, e.kind, e.data) for e in RunEvent.objects.filter(run_id=run_id)],
                 f"killed {holder}")
        assert len(claims) >= 2, story
        assert [c["attributes"]["agentops.takeover"] for c in claims[:2]] == [False, True], story
        assert claims[0]["attributes"]["agentops.worker"] == holder
        assert all(c["attributes"]["agentops.worker"] != holder for c in claims[1:])
        assert all(c["parent_id"] == launch["span_id"] for c in claims)
        epoch_of = {c["span_id"]: c["attributes"]["agentops.epoch"] for c in claims}
        first, last = claims[0]["attributes"]["agentops.epoch"], claims[-1]["attributes"]["agentops.epoch"]

        steps = [s for s in everything if s["name"].startswith("step ")]
        assert all(s["parent_id"] in epoch_of for s in steps)
        by_claim = sorted((epoch_of[s["parent_id"]], s["attributes"]["agentops.step"],
                           s["attributes"]["agentops.replaying"], effects(s)) for s in steps)
        call = (post_downstream.name, False, "done")
        # steps 1 and 2 by the first worker; its step 3 never ended (SIGKILL): its span and
        # its calls' events were never exported. The claim that finished replays step 3's
        # call and makes hold_until's.
        assert by_claim[:2] == [(first, 1, False, [call]), (first, 2, False, [call])]
        assert by_claim[-1] == (last, STEPS, True,
                                [(post_downstream.name, True, "done"), (hold_until.name, False, "done")])
        for epoch, step, replaying, made in by_claim[2:-1]:  # a claim handed back between
            assert (epoch, step, replaying) == (epoch, STEPS, True) and epoch not in (first, last)
            assert made in ([], [(post_downstream.name, True, "done")]), story
        for step in steps:
            for event in step["events"]:
                assert event["attributes"]["agentops.effect.key"].startswith(
                    f"{run_id}:1:{step['attributes']['agentops.step']}:")
                assert "agentops.effect.attempt" not in event["attributes"]  # the first

        # downstream: one request per call that happened (the first worker's three), each
        # under its step's span; the killed step's span never reached the collector
        first_steps = {s["attributes"]["agentops.step"]: s["span_id"] for s in steps
                       if epoch_of[s["parent_id"]] == first}
        received = sorted(collector.received_headers(), key=lambda h: h["idempotency-key"])
        assert [h["idempotency-key"] for h in received] == \
            [f"{run_id}:1:{step}:0" for step in range(1, STEPS + 1)]
        parents = []
        for headers in received:
            _, trace_id, parent_id, _ = headers["traceparent"].split("-")
            assert trace_id == CALLER_TRACE
            parents.append(parent_id)
        assert parents[:2] == [first_steps[1], first_steps[2]]
        assert parents[2] not in {s["span_id"] for s in everything}
    finally:
        server.stop()
        collector.close()


def test_a_deploys_sigterm_exports_the_spans_of_the_runs_it_hands_back(
        transactional_db, tmp_path, start_cluster):
    """The batch processor's own schedule is an hour away: only the hand-off's flush
    can send the worker's spans before the process exits."""
    collector = Collector()
    env = {**stack_env(tmp_path, collector), **NO_TIME_SLICES, "OTEL_BSP_SCHEDULE_DELAY": "3600000"}
    try:
        cluster = start_cluster(workers=1, **env)
        run_id = services.run_launch(user=None, agent="ticker",
                                     inputs={"steps": 400, "delay": 0.05}).id
        try:
            wait_until(lambda: Run.objects.get(pk=run_id).step_no >= 3, TREE_DEADLINE,
                       message="three steps")
        except AssertionError as error:
            run = Run.objects.get(pk=run_id)
            raise AssertionError(f"{error}: {run.status} {run.lease_owner} step {run.step_no}\n"
                                 f"{cluster.output()[-4000:]}") from None
        holder = Run.objects.get(pk=run_id).lease_owner
        cluster.signal(signal.SIGTERM)  # the deploy stops the old tree
        # the run handed back at its next step, spans flushed, then the tree exits; past
        # AGENTOPS_SHUTDOWN_GRACE (20 s), after which the main kills what is left
        cluster.proc.wait(60)
        run = Run.objects.get(pk=run_id)
        assert run.lease_owner is None and run.status == r.QUEUED  # handed back
        assert collector.received, "nothing exported"
        [claim] = run_spans(collector, run_id, "claim ticker")
        assert claim["attributes"]["agentops.worker"] == holder
        steps = sorted((s["attributes"]["agentops.step"], s) for s in
                       run_spans(collector, run_id) if s["name"].startswith("step "))
        # every step that ran, each with its call, but for one the hand-off cut short
        # before its call (the stop is honoured at the next boundary: a step's or a call's)
        assert [n for n, _ in steps] == list(range(1, len(steps) + 1))
        assert len(steps) >= run.step_no
        for n, step in steps:
            if step["attributes"].get("agentops.step.ended_by") == "Stop":
                assert (n, step["events"]) == (len(steps), [])
            else:
                assert [e["name"] for e in step["events"]] == [pause_for.name]
    finally:
        collector.close()
