"""/metrics of a live stack (real Daphne, a real worker tree, one PROMETHEUS_MULTIPROC_DIR)
while runs go through a crash: a worker SIGKILLed inside a non-idempotent call. The
counters move as the run events say: runs succeeded, the takeover, the in-doubt effect
counted and, once an operator resolved it, gone from the gauge.

A scraper samples /metrics all along; the samples become the chart of the dashboard's
main panels (artifacts/observability/panels.png, docs/screenshots/ holds a copy).
"""

from __future__ import annotations

import json
import threading

import pytest

from runs.durable import records as r
from runs.models import Effect, Run, RunEvent
from runs.services import run_launch
from tests.observability.panels import draw_panels
from tests.observability.stack import logged_in, post_form, scrape, stack_env
from tests.support.otlp import Collector
from tests.support.processes import ROOT, TREE_DEADLINE, Server, free_port, wait_until
from tests.workload_agents import pause_for, post_record, send_notification

pytestmark = pytest.mark.services
ARTIFACTS = ROOT / "artifacts" / "observability"
PLAIN_RUNS, STEPS = 4, 10


class Scraper(threading.Thread):
    def __init__(self, url: str, every: float = 0.5):
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.samples, self.stopped = [], threading.Event()

    def run(self):
        while not self.stopped.wait(self.every):
            self.samples.append(scrape(self.url))

    def stop(self):
        self.stopped.set()
        self.join(10)


def status_events(run_ids, status: str, **data) -> int:
    events = RunEvent.objects.filter(run_id__in=run_ids, kind="status", data__status=status)
    for key, value in data.items():
        events = events.filter(**{f"data__{key}": value})
    return events.count()


def test_metrics_follow_the_runs_through_a_worker_crash_and_an_in_doubt_effect(
        transactional_db, users, tmp_path, start_cluster, faults_dir):
    collector = Collector()
    env = stack_env(tmp_path, collector)
    port = free_port()
    sandbox = f"http://127.0.0.1:{port}/sandbox"
    server = Server(tmp_path, port=port, AGENTOPS_SANDBOX_URL=sandbox, **env)
    scraper = None
    try:
        start_cluster(workers=2, AGENTOPS_SANDBOX_URL=sandbox, **env)
        before = scrape(server.url)
        assert before.value("agentops_database_up") == 1
        assert before.value("agentops_lease_takeovers_total") == 0
        assert before.value("agentops_in_doubt_effects") == 0
        wait_until(lambda: scrape(server.url).value("agentops_worker_processes",
                                                     role="worker") == 2, 30,
                   message="both worker processes in the heartbeat")
        scraper = Scraper(server.url)
        scraper.start()

        # 1. plain runs, to the end
        plain = [run_launch(user=users["alice"], agent="steps",
                            inputs={"steps": STEPS, "delay": 0.05}).pk for _ in range(PLAIN_RUNS)]
        # the first runs of a tree just started, four of ten 0.05 s steps, their metrics
        # and spans exported as they go: seconds of work, on CI's loaded cores
        wait_until(lambda: Run.objects.filter(pk__in=plain, status=r.SUCCEEDED).count()
                   == PLAIN_RUNS, 120, message="the plain runs to succeed")
        after_plain = wait_until(lambda: _at_least(
            server.url, "agentops_run_sessions_total", PLAIN_RUNS, outcome="succeeded"), 30,
            message="their endings counted")
        assert after_plain.value("agentops_runs", status="succeeded", agent="steps") == PLAIN_RUNS
        # no worker died yet; a lease lost to a slow database would show in both
        assert after_plain.value("agentops_lease_takeovers_total") == \
            status_events(plain, r.RUNNING, after="crash")

        # 2. a run whose worker is SIGKILLed inside send_notification (not idempotent):
        # the intent is logged, the call may have happened: in doubt after the takeover
        (faults_dir / "before_effect").write_text("kill@send_notification")
        doubtful = run_launch(user=users["alice"], agent="steps",
                              inputs={"steps": 3, "delay": 0, "notify": True}).pk
        wait_until(lambda: Run.objects.filter(pk=doubtful, status=r.NEEDS_ATTENTION).exists(),
                   TREE_DEADLINE, message="the run to be in doubt")
        assert list(faults_dir.glob("before_effect.fired.*")), "the worker was killed"
        in_doubt = wait_until(lambda: _at_least(server.url, "agentops_in_doubt_effects", 1), 30,
                              message="the in-doubt effect in /metrics")
        runs = [*plain, doubtful]
        assert status_events([doubtful], r.RUNNING, after="crash") == 1
        takeovers = status_events(runs, r.RUNNING, after="crash")
        assert in_doubt.value("agentops_lease_takeovers_total", agent="steps") == takeovers
        assert in_doubt.value("agentops_claims_total", kind="takeover") == takeovers
        assert in_doubt.value("agentops_attention_total", kind="in_doubt") == \
            status_events(runs, r.NEEDS_ATTENTION, kind="in_doubt") == 1
        assert in_doubt.value("agentops_in_doubt_effects") == 1
        assert in_doubt.value("agentops_runs", status="needs_attention") == 1

        # 3. an operator says it happened: the run goes on and succeeds
        operator = logged_in(server.url, "charlie", "charlie-pass-1")
        seq = Run.objects.get(pk=doubtful).attention["seq"]
        answer = post_form(operator, f"/ops/runs/{doubtful}/resolve/", {
            "seq": seq, "resolution": "done", "result": '{"count": 1}',
            "reason": "the notification arrived (checked by hand)"})
        assert answer.status_code == 302, answer.text[:500]
        wait_until(lambda: Run.objects.filter(pk=doubtful, status=r.SUCCEEDED).exists(),
                   TREE_DEADLINE, message="the resolved run to succeed")
        final = wait_until(lambda: _at_least(server.url, "agentops_run_sessions_total",
                                             PLAIN_RUNS + 1, outcome="succeeded"), 30,
                           message="its ending counted")
        scraper.stop()
        assert final.value("agentops_in_doubt_effects") == 0
        assert final.value("agentops_operator_actions_total", action="resolve") == 1
        assert final.value("agentops_run_sessions_total", outcome="succeeded") == \
            status_events(runs, r.SUCCEEDED) == PLAIN_RUNS + 1
        assert final.value("agentops_runs_launched_total", agent="steps") == 0, \
            "launched in the test process, not in the stack"
        # every call whose outcome was logged, once: the effect events' outcomes (a call
        # made by a worker that lost its lease meanwhile is counted as fenced, not done)
        for tool in (post_record.name, pause_for.name):
            done = RunEvent.objects.filter(run_id__in=runs, kind="effect", data__tool=tool,
                                           data__status="done").count()
            assert done > 0
            assert final.value("agentops_effect_seconds_count", tool=tool, outcome="done") == done
        assert final.value("agentops_effect_seconds_count", tool=post_record.name,
                           outcome="done") \
            == Effect.objects.filter(run_id__in=runs, tool=post_record.name).count() \
            == PLAIN_RUNS * STEPS + 3
        # the last step of the doubtful run was replayed by both later claims: its record
        # each time from the log, the notification once it was resolved
        assert final.value("agentops_effects_replayed_total", tool=post_record.name) == 2
        assert final.value("agentops_effects_replayed_total", tool=send_notification.name) == 1
        assert final.value("agentops_checkpoint_bytes_count") == \
            sum(Run.objects.get(pk=run_id).checkpoint_count for run_id in runs)
        # the killed worker replaced: the heartbeat lists the new one when it next beats
        wait_until(lambda: scrape(server.url).value("agentops_worker_processes",
                                                     role="worker") == 2, TREE_DEADLINE,
                   message="the killed worker's replacement in the heartbeat")

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "samples.json").write_text(json.dumps(
            [{"at": s.at, "samples": [[n, dict(ls), v] for (n, ls), v in s.samples.items()]}
             for s in scraper.samples]))
        draw_panels(scraper.samples, ARTIFACTS / "panels.png", post_record.name)
    finally:
        if scraper is not None:
            scraper.stop()
        server.stop()
        collector.close()


def _at_least(url: str, name: str, value: float, **labels):
    sample = scrape(url)
    return sample if sample.value(name, **labels) >= value else None
