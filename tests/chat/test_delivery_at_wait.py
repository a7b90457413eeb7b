"""A message queued while a chat run was busy (running, or paused and resumed) answers the
run's next wait in the very commit that begins the wait: nobody ever sees the run
waiting for input while a message for it is queued.

Before, the worker delivered it in a hook after the wait was committed and the run let
go; in between, `runs watch` (docs/api.md's remote command line: `resume`, then
`send --end`, then `watch`) saw a run that waited for input and exited 3.

Each commit's notify (what wakes the run's viewers, after the commit) looks at the run
and its queue: that is the order a viewer sees, step by step, with no timing."""

import pytest

import tests.web.chat_agent  # noqa: F401  (registers echo_chat)
from runs import services
from runs.chat.models import ChatMessage
from runs.chat.services import send_message, waiting_for_message
from runs.durable import InputValidationError, Outcome, execute_run
from runs.models import Run
from runs.storage import database_store
from runs.worker.config import worker_config

pytestmark = pytest.mark.django_db(transaction=True)


class Viewer:
    """The store's notify: after each commit, the run and its queued messages as seen."""

    def __init__(self, run_id: str, on_first=None):
        self.run_id, self.on_first, self.seen = run_id, on_first, []

    def __call__(self, run_id: str, seq: int) -> None:
        if not self.seen and self.on_first is not None:
            self.on_first()
        run = Run.objects.get(pk=self.run_id)
        queued = ChatMessage.objects.filter(run=run, state=ChatMessage.QUEUED).count()
        self.seen.append((seq, run.status, waiting_for_message(run), queued))

    def waited_with_a_message_queued(self) -> list:
        return [seen for seen in self.seen if seen[2] and seen[3]]


def execute(run_id: str, viewer=None) -> str:
    return execute_run(database_store(notify=viewer), run_id, worker_config())


def to_first_wait(users) -> Run:
    run = services.run_launch(user=users["alice"], agent="echo_chat", inputs={"first": "one"})
    assert execute(run.pk) == Outcome.WAITING
    return Run.objects.get(pk=run.pk)


def test_an_end_sent_between_resume_and_the_wait_is_taken_at_the_wait(users):
    run = to_first_wait(users)
    services.run_pause(run_id=run.pk, user=users["charlie"], reason="maintenance")
    services.run_resume(run_id=run.pk, user=users["charlie"], reason="maintenance over")
    message = send_message(run=Run.objects.get(pk=run.pk), user=users["alice"], text="",
                           end=True)
    assert message.state == ChatMessage.QUEUED  # resumed, not waiting yet

    viewer = Viewer(run.pk)
    assert execute(run.pk, viewer) == Outcome.WAITING  # the resumed wait, committed
    assert viewer.seen, "the wait was committed"
    assert viewer.waited_with_a_message_queued() == []
    message.refresh_from_db()
    assert message.state == ChatMessage.DELIVERED
    assert not waiting_for_message(Run.objects.get(pk=run.pk))
    assert execute(run.pk) == Outcome.SUCCEEDED


def test_a_message_sent_while_the_run_works_is_taken_at_its_next_wait(users):
    run = services.run_launch(user=users["alice"], agent="echo_chat", inputs={"first": "one"})
    sent = []
    viewer = Viewer(run.pk, on_first=lambda: sent.append(send_message(
        run=Run.objects.get(pk=run.pk), user=users["alice"], text="two")))
    assert execute(run.pk, viewer) == Outcome.WAITING
    assert sent[0].state == ChatMessage.QUEUED  # the run was working when it came
    assert viewer.waited_with_a_message_queued() == []
    assert ChatMessage.objects.get(pk=sent[0].pk).state == ChatMessage.DELIVERED
    assert execute(run.pk) == Outcome.WAITING  # its answer to "two", then the next wait
    state = Run.objects.get(pk=run.pk).checkpoints.order_by("-number").first().state()
    assert [m["content"] for m in state["messages"] if m["role"] == "user"] == ["one", "two"]


def test_a_message_sent_to_a_run_about_to_pause_is_taken_after_the_resume(users):
    run = services.run_launch(user=users["alice"], agent="echo_chat", inputs={"first": "one"})

    def pause_and_send():  # the run works: the pause waits for its next boundary
        services.run_pause(run_id=run.pk, user=users["charlie"], reason="maintenance")
        send_message(run=Run.objects.get(pk=run.pk), user=users["alice"], text="two")

    assert execute(run.pk, Viewer(run.pk, on_first=pause_and_send)) == Outcome.PAUSED
    assert ChatMessage.objects.get(run=run).state == ChatMessage.QUEUED
    services.run_resume(run_id=run.pk, user=users["charlie"], reason="maintenance over")
    viewer = Viewer(run.pk)
    assert execute(run.pk, viewer) == Outcome.WAITING
    assert viewer.waited_with_a_message_queued() == []
    assert ChatMessage.objects.get(run=run).state == ChatMessage.DELIVERED


def test_a_message_the_waiting_question_refuses_is_refused_to_its_sender(users):
    run = services.run_launch(user=users["alice"], agent="yes_or_no_chat", inputs={})
    assert execute(run.pk) == Outcome.WAITING
    with pytest.raises(InputValidationError):
        send_message(run=Run.objects.get(pk=run.pk), user=users["alice"], text="yes")
    assert not ChatMessage.objects.filter(run=run).exists()  # not kept
    assert waiting_for_message(Run.objects.get(pk=run.pk))


def test_a_queued_message_the_next_question_refuses_stays_queued_and_the_wait_holds(users):
    run = services.run_launch(user=users["alice"], agent="yes_or_no_chat", inputs={})
    message = send_message(run=Run.objects.get(pk=run.pk), user=users["alice"], text="yes")
    assert message.state == ChatMessage.QUEUED  # not waiting yet
    assert execute(run.pk) == Outcome.WAITING  # the wait's commit is not failed by it
    assert waiting_for_message(Run.objects.get(pk=run.pk))
    assert ChatMessage.objects.get(pk=message.pk).state == ChatMessage.QUEUED
    services.run_provide_input(run_id=run.pk, value={"approve": True}, user=users["alice"])
    assert execute(run.pk) == Outcome.SUCCEEDED
