"""Reads of the chat: what the run page's conversation panel shows besides the
transcript."""

from __future__ import annotations

from runs.chat.models import ChatMessage
from runs.models import Run


def queued_messages(run: Run) -> list[ChatMessage]:
    """The run's messages not taken yet, oldest first: each answers one of its waits."""
    return list(ChatMessage.objects.filter(run=run, state=ChatMessage.QUEUED).order_by("id"))
