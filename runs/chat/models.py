"""A user's chat message, kept until the run waits for input and takes it."""

from django.conf import settings
from django.db import models

MAX_MESSAGE_CHARS = 8000


class ChatMessage(models.Model):
    QUEUED = "queued"
    DELIVERED = "delivered"
    STATES = ((QUEUED, "queued"), (DELIVERED, "delivered"))

    # Like the run's other rows: no database foreign key, nothing deletes runs.
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="chat_messages",
                            db_constraint=False)
    sender = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")
    text = models.TextField(blank=True)
    end = models.BooleanField(default=False, help_text="the user ended the chat")
    state = models.CharField(max_length=16, choices=STATES, default=QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_chatmessage"  # made when chat was part of the runs app: kept
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "state", "id"], name="chat_queue")]

    def __str__(self):
        return f"chat message {self.pk} ({self.state})"
