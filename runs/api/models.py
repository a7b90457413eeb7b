"""Personal API tokens and the Idempotency-Key records of launches."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

SCOPES = ("read", "launch", "operate")


class ApiToken(models.Model):
    """A user's token. Only a digest of the secret is stored: the secret is shown once,
    when it is made. `prefix` (the secret's first characters) names it on the page."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None
                                            or self.expires_at > timezone.now())


class IdempotentLaunch(models.Model):
    """One Idempotency-Key of one user: the run it launched and the digest of the
    request it came with. The run id is chosen before the launch, so a launch that
    died half-way is finished by the next request with the same key and body."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="+")
    key = models.CharField(max_length=255)
    request_digest = models.CharField(max_length=64)
    run_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"],
                                               name="idempotent_launch_unique_key")]
        indexes = [models.Index(fields=["created_at"], name="idempotent_launch_created")]
