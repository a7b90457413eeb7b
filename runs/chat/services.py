"""Sending a chat message to a run: taken at once by a run that waits for input,
queued for its next wait otherwise.

Both sides deliver after their own write, and the run's row orders them: the sender
after queuing its message (it locks the run's row, then the queue), and the commit
that makes the run wait for input, inside its own transaction, the run's row locked
by it (the store's input_wait hook, runs/storage/commits.py). Whichever comes second
sees the other's write, so a message sent while the run is busy (working, paused,
resumed) is never left behind, and the run is never seen waiting for input with a
message queued for it; the message is marked delivered in the transaction that
answers the run, so none is delivered twice.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from runs import services
from runs.chat.models import ChatMessage
from runs.chat.transcript import conversation_key
from runs.durable import InputValidationError, InvalidTransitionError
from runs.durable import records as r
from runs.models import Run


class ChatRefused(Exception):
    """The run does not take chat messages (not a chat agent, or it has ended)."""


def send_message(*, run: Run, user, text: str, end: bool = False) -> ChatMessage:
    """Queue `text` (or the end of the chat) and deliver it if the run waits now."""
    if conversation_key(run) is None:
        raise ChatRefused("This run is not a chat: it takes no messages.")
    if run.status in r.FINAL_STATUSES:
        raise ChatRefused(f"The run has {run.status}: it takes no more messages.")
    with transaction.atomic():
        message = ChatMessage.objects.create(run=run, sender=user, text=text, end=end)
        # A message the waiting prompt refuses is not kept: its sender hears why
        # (InputValidationError), as an answer on the form would say.
        _deliver_oldest(run.pk)
    message.refresh_from_db()
    return message


def waiting_for_message(run: Run) -> bool:
    return run.status == r.WAITING and (run.attention or {}).get("kind") == "input"


def deliver_queued(run_id: str) -> bool:
    """Answer the run's wait with its oldest queued message, if it waits. True if one was.
    The input_wait hook: called inside the commit of a wait for input."""
    try:
        return _deliver_oldest(run_id)
    except InputValidationError:
        # This wait's prompt takes no such message: it stays queued and the question is
        # answered on its form. Raised on, it would fail the commit of the wait, and the
        # run would take that for a database fault.
        return False


def _deliver_oldest(run_id: str) -> bool:
    with transaction.atomic():
        # The run's row first, as the commit of its wait locks it before calling this:
        # one order of locks for both sides, or each would wait for the other's.
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        # A wait committed with a pause or cancel pending is paused or cancelled at once
        # (endings._late_control): the message waits for the wait after the resume.
        if run is None or not waiting_for_message(run) or run.control:
            return False
        message = (ChatMessage.objects.select_for_update()
                   .filter(run_id=run_id, state=ChatMessage.QUEUED).order_by("id").first())
        if message is None:
            return False
        try:
            services.run_provide_input(run_id=run_id, value=message_value(message),
                                       user=message.sender)
        except InvalidTransitionError:  # answered meanwhile by someone else
            return False
        message.state, message.delivered_at = ChatMessage.DELIVERED, timezone.now()
        message.save(update_fields=["state", "delivered_at"])
    return True


def message_value(message: ChatMessage) -> dict:
    """What the agent's ctx.wait_for_input returns for a message."""
    return {"message": message.text, "end": True} if message.end else {"message": message.text}
