"""The crawl agent on real workers, against the sandbox site served by Daphne."""

from collections import Counter

import httpx
import pytest

from runs.models import Effect, RunEvent
from sandbox import site
from tests.agents.helpers import (
    ONE_RUN_PER_WORKER,
    cluster_env,
    kill_holder,
    killed_runs_resumed,
    launch,
    resumes_after_a_crash,
    wait_final,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

PAGES = 300


def crawl_inputs(server) -> dict:
    # batch 5: 60 steps, checkpoints every 20 of them, so kills land in different stretches
    return {"site_url": f"{server.url}/sandbox/site", "pages": PAGES, "latency_ms": 5,
            "error_rate": 0.05, "batch": 5}


def assert_report_matches_the_site(report: dict, generation: int = 0) -> None:
    expected = site.expected_crawl(PAGES, generation)
    assert report["generation"] == generation
    assert report["pages"] == {"discovered": len(expected.reachable),
                               "fetched": len(expected.fetched_ok),
                               "failed": len(expected.broken)}
    assert [tuple(t) for t in report["top_terms"]] == expected.top_terms
    assert report["terms"] == {"distinct": len(expected.term_counts),
                               "total": sum(expected.term_counts.values())}
    links = {n: site.page_links(n, PAGES) for n in expected.fetched_ok}
    inlinks = Counter(m for targets in links.values() for m in targets)
    assert report["link_graph"]["pages"] == len(expected.fetched_ok)
    assert report["link_graph"]["edges"] == sum(len(targets) for targets in links.values())
    assert [tuple(p) for p in report["link_graph"]["most_linked"]] == sorted(
        inlinks.items(), key=lambda item: (-item[1], item[0]))[:10]
    assert {f["page"] for f in report["failures"]} == expected.broken
    assert all("HTTP 404" in f["error"] for f in report["failures"])


def test_the_report_matches_the_site_and_survives_three_sigkills(server, start_cluster):
    cluster = start_cluster(workers=2, **cluster_env(server, **ONE_RUN_PER_WORKER))
    inputs = crawl_inputs(server)
    reference, victim = launch("crawl", inputs), launch("crawl", inputs)
    kill_holder(victim, cluster, [
        lambda run: run.progress_done >= 40,  # before the first checkpoint after the start
        lambda run: run.step_no >= 20,
        lambda run: run.step_no >= 40,
    ])
    runs = wait_final([reference, victim])
    assert_report_matches_the_site(runs[reference].output)
    assert runs[victim].output == runs[reference].output
    assert runs[reference].output["fetches"] == len(site.expected_crawl(PAGES).reachable)
    killed_runs_resumed(victim, 3)
    assert resumes_after_a_crash(reference) == 0  # the reference ran uninterrupted
    # The flaky pages answered 503 once and were fetched by a retry of the tool.
    assert Effect.objects.filter(run_id__in=[reference, victim], attempts__gt=1).exists()


def test_pages_changed_while_the_crawl_was_away_are_fetched_again(server, start_cluster):
    cluster = start_cluster(workers=1, **cluster_env(server))
    run_id = launch("crawl", crawl_inputs(server))
    kill_holder(run_id, cluster, [lambda run: run.progress_done >= 150])
    # While no worker holds the crawl, the site changes (generation 0 → 1).
    bumped = httpx.post(f"{server.url}/sandbox/site/generation/bump",
                        params={"pages": PAGES}).json()
    assert bumped["generation"] == 1 and bumped["changed"]
    report = wait_final([run_id])[run_id].output
    assert_report_matches_the_site(report, generation=1)
    assert report["refetched"] >= 1
    logs = [e.data["message"] for e in RunEvent.objects.filter(run_id=run_id, kind="log")]
    assert any("moved to generation 1 while the crawl was away" in m for m in logs), logs
