"""The assistant agent on real workers, talking to the sandbox's scripted model over HTTP."""

import re

import pytest

from sandbox import site
from sandbox.models import Record
from sandbox.scripted_llm import query_from
from tests.agents.helpers import (
    ONE_RUN_PER_WORKER,
    assert_nothing_reached_the_target_twice,
    cluster_env,
    kill_holder,
    killed_runs_resumed,
    launch,
    resumes_after_a_crash,
    wait_final,
)

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

QUESTIONS = ["Which pages mention a boat or the city, and how many are there?",
             "What about pages on the army and a gift?",
             "And pages that talk about a park or a lane?"]
SCAN, SITE_PAGES = 60, 10_000


def assistant_inputs(server) -> dict:
    sandbox = f"{server.url}/sandbox"
    return {"question": QUESTIONS[0], "follow_ups": QUESTIONS[1:],
            "base_url": f"{sandbox}/llm/v1", "site_url": f"{sandbox}/site",
            "target_url": f"{sandbox}/api", "site_pages": SITE_PAGES, "latency_ms": 20,
            "search_scan": SCAN, "chat": False}


def expected_search(question: str) -> tuple[int, str]:
    """How many of the scanned pages match the question's query, and the best one's title."""
    words = set(query_from(question).split())
    scores = {n: sum(site.page_words(n).count(w) for w in words)
              for n in range(SCAN) if not site.is_broken(n)}
    hits = sorted((n for n, s in scores.items() if s), key=lambda n: (-scores[n], n))
    return len(hits), site.page_title(hits[0])


def assert_answers_use_the_tools(run) -> None:
    output = run.output
    notes = Record.objects.filter(unit__startswith=f"{run.id}-note-").order_by("id")
    assert len(notes) == len(QUESTIONS)
    for (question, answer), note in zip(
            [(a["question"], a["answer"]) for a in output["answers"]], notes, strict=True):
        hits, top = expected_search(question)
        assert f"found {hits} hits" in answer, (answer, output["memory"])
        assert f"the top hit is {top}" in answer, answer
        assert f"{hits} * 2 = {hits * 2}" in answer, answer  # the calculator's result
        assert f"note with id {note.pk}" in answer, answer   # the id write_note returned
        assert note.payload["title"] == f"Research: {query_from(question)}"
    assert output["answer"] == output["answers"][-1]["answer"]
    assert output["tool_calls"] == 3 * len(QUESTIONS)


def without_note_ids(output) -> str:
    return re.sub(r"(note with id|note) \d+", r"\1 N", repr(output))


def test_answers_use_the_tools_and_survive_three_sigkills(server, start_cluster):
    cluster = start_cluster(workers=2, **cluster_env(server, **ONE_RUN_PER_WORKER))
    inputs = assistant_inputs(server)
    reference, victim = launch("assistant", inputs), launch("assistant", inputs)
    # 3 questions x (think, search, think, calculate, think, note, answer) = 21 steps
    kill_holder(victim, cluster, [lambda run: run.step_no >= 2,
                                  lambda run: run.step_no >= 7,
                                  lambda run: run.step_no >= 12])
    runs = wait_final([reference, victim])
    for run in runs.values():
        assert_answers_use_the_tools(run)
        assert_nothing_reached_the_target_twice(run.id)
    assert without_note_ids(runs[victim].output) == without_note_ids(runs[reference].output)
    killed_runs_resumed(victim, 3)
    assert resumes_after_a_crash(reference) == 0  # the reference ran uninterrupted
