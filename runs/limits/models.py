"""Shared limits: what the admin says a limit is, and its state when the database
keeps it (without Redis). The algorithm is the engine's (runs/durable/policies/limits.py)."""

from django.core.exceptions import ValidationError
from django.db import models

from runs.durable.policies import limits as lim


class Limit(models.Model):
    """A limit a tool names (`@tool(limit="llm")`). A row here wins over the settings'
    AGENTOPS["LIMITS"]; a disabled row turns the settings' limit of that name off."""

    name = models.CharField(max_length=100, unique=True,
                            help_text='the name tools give, e.g. "llm" (the built-in model tool)')
    requests = models.PositiveIntegerField(null=True, blank=True,
                                           help_text="calls let through per window")
    per_seconds = models.FloatField(default=60.0, help_text="the window, in seconds (60: a minute)")
    concurrency = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="calls in flight at once")
    tokens = models.PositiveIntegerField(null=True, blank=True,
                                         help_text="model tokens (prompt + completion) per window")
    lease_seconds = models.FloatField(
        default=600.0, help_text="a call in flight longer than this (its worker died) is "
                                 "taken as ended")
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name}: {self.rule().describe()}" if self.enabled else f"{self.name}: off"

    def rule(self) -> lim.LimitRule:
        return lim.LimitRule(name=self.name, requests=self.requests, per=self.per_seconds,
                             concurrency=self.concurrency, tokens=self.tokens,
                             lease=self.lease_seconds)

    def clean(self):
        try:
            self.rule()
        except lim.LimitConfigError as exc:
            raise ValidationError(str(exc)) from None


class LimitState(models.Model):
    """A limit's grants, waiters and Retry-After, updated under the row's lock by every
    worker (runs/limits/stores.py); with Redis this table stays empty."""

    name = models.CharField(max_length=100, primary_key=True)
    state = models.JSONField(default=lim.empty_state)
    version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.name
