"""What the outside world remembers: every call that reached it.

These rows are the evidence the durability tests read: a side effect that
happened twice shows up here as two records for one unit of work, or as one
key called many times.
"""

from django.db import models


class IdempotencyKey(models.Model):
    """The stored outcome of the first request made under one Idempotency-Key.

    The row is inserted in state ``processing`` before the work starts, so the
    unique constraint on ``key`` lets the database decide which of two racing
    requests owns the key; the loser answers 409 instead of doing the work twice.
    """

    PROCESSING = "processing"
    DONE = "done"
    STATES = ((PROCESSING, "processing"), (DONE, "done"))

    key = models.CharField(max_length=255, unique=True)
    request_digest = models.CharField(max_length=64, help_text="SHA-256 of the canonical JSON body")
    state = models.CharField(max_length=16, choices=STATES, default=PROCESSING)
    # A fresh token per claim: finishing is conditional on it, so a request whose
    # stale claim was taken over cannot complete (or write a record) afterwards.
    claim_token = models.CharField(max_length=32)
    claimed_at = models.DateTimeField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.key} ({self.state})"


class Record(models.Model):
    """One record written through the idempotent API: at most one per key."""

    key = models.CharField(max_length=255, unique=True)
    # Copied from payload["unit"]: the caller's id for the unit of work, so two
    # keys that wrote the same unit (a duplicate side effect) can be counted.
    unit = models.CharField(max_length=255, blank=True, default="", db_index=True)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"record {self.pk} ({self.key})"


class KeyCall(models.Model):
    """How often each Idempotency-Key reached the records API, whatever the outcome."""

    key = models.CharField(max_length=255, unique=True)
    calls = models.PositiveIntegerField(default=0)
    replays = models.PositiveIntegerField(default=0, help_text="answered from the stored response")
    conflicts = models.PositiveIntegerField(default=0, help_text="409: still being processed")
    mismatches = models.PositiveIntegerField(default=0, help_text="422: same key, other body")
    rejected = models.PositiveIntegerField(default=0, help_text="400: body not a JSON object")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    def __str__(self):
        return f"{self.key}: {self.calls} calls"


class Notification(models.Model):
    """One call of the non-idempotent notifications API: every call is a new row."""

    body = models.JSONField()
    unit = models.CharField(max_length=255, blank=True, default="", db_index=True)
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"notification {self.pk}"


class SiteGeneration(models.Model):
    """The generated site's content version (a single row, pk=1)."""

    generation = models.PositiveIntegerField(default=0)
    bumped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"generation {self.generation}"


class PageHit(models.Model):
    """Requests per flaky site page: a flaky page fails only its first request."""

    page = models.PositiveIntegerField(unique=True)
    hits = models.PositiveIntegerField(default=0)

    def __str__(self):
        return f"page {self.page}: {self.hits} hits"


class LlmCall(models.Model):
    """One request that reached the scripted model, under its Idempotency-Key.

    The evidence for a streamed answer cut short: the retry after a crash shows up
    as a second request under the same key, and the cut one never completed."""

    key = models.CharField(max_length=255, blank=True, default="", db_index=True)
    streamed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"llm call {self.pk} ({self.key or 'no key'})"
