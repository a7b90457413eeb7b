"""Chromium on a chat run (the `assistant`, real worker trees, the sandbox's
scripted model streaming a token at a time): the answer streams into the
conversation; a page closed and opened again mid-answer shows the text so far at
once and then the rest, each character once; a worker killed mid-answer leaves its
partial answer marked as discarded, the next attempt streams in its place under the
same idempotency key, and the transcript holds one answer."""

from __future__ import annotations

import os
import signal

import pytest

from runs import services
from runs.models import Effect, Run
from sandbox.models import LlmCall
from tests.crash.helpers import holder_pid
from tests.support.processes import wait_until
from tests.web.conftest import ask_page, log_in, new_context, screenshot, wait_caught_up

# The runs' own work sets these tests' pace (a worker tree started by each, the assistant's
# calls through the sandbox, an answer streamed a token at a time): pytest-timeout's cap
# on a whole test, and ANSWER_SECONDS, the deadline of the worker's part of a wait, are
# that work's on a machine at a load of 10-25. What the page does is waited for with the
# context's own deadline, once the run got there.
pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.timeout(600)]
ANSWER_SECONDS = 120

LIVE = '#live-indicator[data-state="live"]'
TOKEN_MS = 300  # the scripted model's pause before each token: an answer takes ~12 s
STREAMING = """(least) => {
  const a = [...document.querySelectorAll('.chat-stream [data-state="streaming"]')].pop();
  const text = a && a.querySelector('.msg-text').textContent;
  return text && text.length >= least ? text : null;
}"""
# Installed in every page before its scripts: what the streamed area showed after each
# change (so nothing is missed between two looks from here), and the first finished
# attempt with the discarded ones before it, kept after the transcript replaced them.
RECORDER = """(() => {
  window.__samples = []; window.__done = null;
  let last = null;
  new MutationObserver(() => {
    const shown = [...document.querySelectorAll('.chat-stream .msg-text')]
      .map((t) => t.textContent).join('|');
    if (shown && shown !== last) { window.__samples.push(shown); last = shown; }
    const a = document.querySelector('.chat-stream [data-state="done"]');
    if (a && !window.__done) {
      window.__done = {key: a.parentElement.dataset.key,
                       text: a.querySelector('.msg-text').textContent,
                       discarded: [...a.parentElement.querySelectorAll('[data-state="discarded"]')]
                         .map((d) => d.querySelector('.msg-text').textContent)};
    }
  }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true,
                        attributeFilter: ["data-state"]});
})();"""


def assistant_inputs(server) -> dict:
    sandbox = f"{server.url}/sandbox"
    return {"question": "Which pages mention a boat?", "base_url":
            f"{sandbox}/llm/v1?token_ms={TOKEN_MS}", "site_url": f"{sandbox}/site",
            "target_url": f"{sandbox}/api", "site_pages": 40, "search_scan": 10,
            "latency_ms": 0}


def answer_of(run_id: str) -> str:
    state = Run.objects.get(pk=run_id).checkpoints.order_by("-number").first().state()
    return [m for m in state["messages"] if m["role"] == "assistant"][-1]["content"]


def open_run(context, server, run_id: str):
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/runs/{run_id}/")
    page.wait_for_selector(LIVE)
    return page, errors


def wait_waiting(run_id: str) -> None:
    wait_until(lambda: Run.objects.get(pk=run_id).status == "waiting", ANSWER_SECONDS,
               message="the assistant to answer and wait for the next message")


def streamed(run, more_than: int = 0) -> int:
    """Wait until the run has more than `more_than` stream events; returns how many."""
    return wait_until(lambda: (n := run.events.filter(kind="stream").count()) > more_than and n,
                      ANSWER_SECONDS, message=f"more than {more_than} stream events")


def test_a_page_reopened_mid_answer_shows_it_whole_each_character_once(
        users, server, start_cluster, browser):
    run = services.run_launch(user=users["alice"], agent="assistant",
                              inputs=assistant_inputs(server))
    context = new_context(browser, viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(20_000)
    context.add_init_script(RECORDER)
    log_in(context.new_page(), server.url, "alice", "alice-pass-1")
    page, errors = open_run(context, server, run.pk)
    start_cluster(workers=1, AGENTOPS_SANDBOX_URL=f"{server.url}/sandbox")  # the page watches
    streamed(run, 2)  # the answer is streaming
    before_close = ask_page(page, STREAMING, arg=8, polling=50).json_value()
    page.close()
    # the answer goes on while nobody watches
    streamed(run, run.events.filter(kind="stream").count() + 2)
    page, errors = open_run(context, server, run.pk)
    wait_waiting(run.pk)
    wait_caught_up(page, run.pk)  # the whole answer applied, the transcript redrawn
    done = page.evaluate("() => window.__done")
    samples = page.evaluate("() => window.__samples")
    answer = answer_of(run.pk)
    assert done["text"] == answer and not done["discarded"]
    at_open = samples[0]  # the first render's: the text so far, at once
    assert len(at_open) > len(before_close) and at_open != answer  # reopened mid-answer
    for sample in samples:  # never a character twice, never one out of place
        assert answer.startswith(sample), (sample, answer)
    # Once the step is checkpointed the transcript holds the answer, once, and the
    # streamed copy is gone.
    assert page.locator(".chat-stream").count() == 0
    assistant_texts = page.eval_on_selector_all(
        "#panel-conversation .msg-assistant .msg-text", "els => els.map(e => e.textContent)")
    assert assistant_texts.count(answer) == 1
    # a follow-up, sent as a chat message to the run that waits for one
    first_answer = run.events.filter(kind="stream").count()
    page.fill("#chat-text", "And a <b>city</b>?")
    page.click("#chat-form button[type=submit]:not([name])")
    page.wait_for_selector("#panel-conversation .msg-user >> text=And a <b>city</b>?")
    streamed(run, first_answer + 2)  # the second answer is streaming
    ask_page(page, STREAMING, arg=8, polling=50)
    screenshot(page, "conversation")
    assert not errors, errors


def test_a_worker_killed_mid_answer_shows_the_attempt_discarded_and_streams_it_again(
        users, server, start_cluster, browser):
    run = services.run_launch(user=users["alice"], agent="assistant",
                              inputs=assistant_inputs(server))
    context = new_context(browser, viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(20_000)
    context.add_init_script(RECORDER)
    log_in(context.new_page(), server.url, "alice", "alice-pass-1")
    page, errors = open_run(context, server, run.pk)
    start_cluster(workers=1, AGENTOPS_SANDBOX_URL=f"{server.url}/sandbox")  # the page watches
    # The worker's own progress says when: the page may lag it by seconds on a busy machine.
    streamed(run, 1)
    pid = holder_pid(run.pk)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_waiting(run.pk)
    wait_caught_up(page, run.pk)  # both attempts applied, the transcript redrawn
    done = page.evaluate("() => window.__done")
    answer = answer_of(run.pk)
    assert done["text"] == answer
    for sample in page.evaluate("() => window.__samples"):  # each attempt, each character once
        assert all(answer.startswith(part) for part in sample.split("|")), (sample, answer)
    assert len(done["discarded"]) == 1  # the cut attempt, marked, its text a start of the answer
    assert done["discarded"][0] and answer.startswith(done["discarded"][0])
    assert done["discarded"][0] != answer
    # the sandbox saw the retry under the same key; the first request never completed
    # (the sandbox notes a stream's end after its last event went out: wait for it)
    calls = wait_until(lambda: (found := list(LlmCall.objects.filter(key=done["key"])
                                              .order_by("id")))[-1:] and
                       found[-1].completed_at and found, 30, message="the retry's end noted")
    assert len(calls) == 2 and calls[0].completed_at is None and calls[1].completed_at
    assert Effect.objects.filter(run_id=run.pk, key=done["key"]).count() == 1
    assert page.locator(".chat-stream").count() == 0
    assistant_texts = page.eval_on_selector_all(
        "#panel-conversation .msg-assistant .msg-text", "els => els.map(e => e.textContent)")
    assert assistant_texts.count(answer) == 1
    assert not errors, errors
