"""Sending a chat message to a run: taken at once by a run that waits for input,
queued for its next wait otherwise.

Both sides deliver after their own write: the sender after queuing its message,
the worker after the run starts waiting (runs/worker/execute.py). Whichever comes
second sees the other's write, so a message sent while the run is about to wait
is never left behind; the queue row is locked while it is delivered, and marked
delivered in the transaction that answers the run, so none is delivered twice.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from runs import services
from runs.chat.models import ChatMessage
from runs.chat.transcript import conversation_key
from runs.durable import InvalidTransitionError
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
    message = ChatMessage.objects.create(run=run, sender=user, text=text, end=end)
    deliver_queued(run.pk)
    message.refresh_from_db()
    return message


def waiting_for_message(run: Run) -> bool:
    return run.status == r.WAITING and (run.attention or {}).get("kind") == "input"


def deliver_queued(run_id: str) -> bool:
    """Answer the run's wait with its oldest queued message, if it waits. True if one was."""
    with transaction.atomic():
        message = (ChatMessage.objects.select_for_update()
                   .filter(run_id=run_id, state=ChatMessage.QUEUED).order_by("id").first())
        if message is None:
            return False
        run = Run.objects.get(pk=run_id)
        if not waiting_for_message(run):
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
