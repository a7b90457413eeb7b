"""Schedules: an agent launched with fixed inputs on a cron expression or an interval.

`next_at` is the next slot the schedule is due at; the tick (tick.py) moves it on with
a conditional UPDATE, which is how several clusters agree on who launches a slot."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone


class Overlap(models.TextChoices):
    SKIP = "skip", "skip: no launch while the previous run is active"
    QUEUE = "queue", "queue: launch once the previous run ends (one waits, at most)"
    ALLOW = "allow", "allow: launch at every slot"


class Kind(models.TextChoices):
    CRON = "cron", "cron expression"
    INTERVAL = "interval", "interval"


class Schedule(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="schedules")
    name = models.CharField(max_length=100)
    agent = models.CharField(max_length=100)
    inputs = models.JSONField(default=dict, blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.CRON)
    cron = models.CharField(max_length=120, blank=True, default="",
                            help_text="five fields, UTC: minute hour day month weekday")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    overlap = models.CharField(max_length=10, choices=Overlap.choices, default=Overlap.SKIP)
    paused = models.BooleanField(default=False)
    # the next slot due; None while paused
    next_at = models.DateTimeField(null=True, blank=True)
    # queue policy: a slot that came while the previous run was active, launched when it ends
    queued_slot = models.DateTimeField(null=True, blank=True)
    last_run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+", db_constraint=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "pk"]
        indexes = [models.Index(fields=["next_at"], name="schedule_due",
                                condition=Q(paused=False))]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("schedules:detail", args=[self.pk])

    @property
    def timing(self) -> str:
        if self.kind == Kind.CRON:
            return f"cron {self.cron}"
        return f"every {self.interval_seconds} s"


class LaunchOutcome(models.TextChoices):
    LAUNCHED = "launched", "launched"
    SKIPPED = "skipped", "skipped (previous run active)"
    QUEUED = "queued", "queued (previous run active)"
    FAILED = "failed", "failed to launch"


class ScheduleLaunch(models.Model):
    """One slot of a schedule and what became of it."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="launches")
    slot_at = models.DateTimeField()
    outcome = models.CharField(max_length=10, choices=LaunchOutcome.choices)
    run = models.OneToOneField("runs.Run", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="schedule_launch", db_constraint=False)
    # slots that passed without a tick (downtime) and were folded into this one
    missed = models.IntegerField(default=0)
    detail = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-slot_at", "-pk"]
        indexes = [models.Index(fields=["schedule", "-slot_at"], name="schedule_launch_recent")]

    def __str__(self):
        return f"{self.schedule} @ {self.slot_at:%Y-%m-%d %H:%M:%S} {self.outcome}"
