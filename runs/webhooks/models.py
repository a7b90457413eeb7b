"""Webhook subscriptions, the deliveries made for them and every attempt of each.

A delivery is one event for one subscription, made by a run of the system agent
`webhook_delivery` (agents.py), so its retries are the engine's durable retries. The
(subscription, run, seq) constraint makes an event delivered to a subscription once,
however many clusters dispatch (dispatch.py)."""

import secrets

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

RUN_ENDED = "run.ended"
NEEDS_ATTENTION = "run.needs_attention"
WAITING_FOR_INPUT = "run.waiting_for_input"
EVENT_TYPES = [
    (RUN_ENDED, "run ended (succeeded, failed or cancelled)"),
    (NEEDS_ATTENTION, "run needs attention"),
    (WAITING_FOR_INPUT, "run is waiting for input"),
]


def new_secret() -> str:
    # the Standard Webhooks form: whsec_ + base64 of the key (24 random bytes)
    import base64

    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class Scope(models.TextChoices):
    MINE = "mine", "my runs"
    ALL = "all", "every run (operators)"


class Subscription(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="webhook_subscriptions")
    url = models.CharField(max_length=2000)
    description = models.CharField(max_length=200, blank=True, default="")
    events = models.JSONField(default=list, help_text="event types, e.g. run.ended")
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.MINE)
    secret = models.CharField(max_length=100, default=new_secret)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"{self.url} ({self.owner_id})"

    def get_absolute_url(self):
        return reverse("webhooks:detail", args=[self.pk])


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed (retries exhausted or refused)"


class Delivery(models.Model):
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE,
                                     related_name="deliveries")
    event_type = models.CharField(max_length=40)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+",
                            db_constraint=False)
    seq = models.BigIntegerField(help_text="the run event's number")
    # the Standard Webhooks message id: the same on every attempt, receivers dedup on it
    msg_id = models.CharField(max_length=40, unique=True)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices,
                              default=DeliveryStatus.PENDING)
    delivery_run = models.ForeignKey("runs.Run", null=True, blank=True, related_name="+",
                                     on_delete=models.SET_NULL, db_constraint=False)
    attempts = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["subscription", "run", "seq"],
                                               name="delivery_once_per_event")]
        indexes = [models.Index(fields=["subscription", "-created_at"],
                                name="delivery_recent")]

    def __str__(self):
        return f"{self.event_type} {self.run_id[:8]}#{self.seq} → {self.subscription_id}"


class Attempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.FloatField(default=0)
    status_code = models.IntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True, default="", help_text="clipped")
    error = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"],
                                               name="attempt_unique_number")]

    def __str__(self):
        return f"attempt {self.number} of {self.delivery_id}: {self.status_code or self.error}"

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class DispatchCursor(models.Model):
    """One row: how far the run events have been turned into deliveries (dispatch.py)."""

    last_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)
