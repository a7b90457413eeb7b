"""Personal API tokens: made with a secret shown once, stored as its SHA-256 digest.

A token is 32 random bytes, so a plain digest is enough (no salt or slow hash: there
is no dictionary to guess from), and it can be looked up by its digest, unique in
the table. Scopes narrow what the user may do; they never widen it."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from runs.api.models import SCOPES, ApiToken

PREFIX = "aop_"
TOUCH_EVERY = timedelta(minutes=1)  # last_used_at: one write a minute per token at most


class TokenError(Exception):
    """A token that cannot be made as asked (bad scopes, expiry, name)."""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def create(user, *, name: str, scopes, days: int, max_days: int) -> tuple[ApiToken, str]:
    """A new token and its secret (the only time the secret exists outside the client)."""
    scopes = sorted(set(scopes))
    if not scopes or not set(scopes) <= set(SCOPES):
        raise TokenError(f"choose one or more scopes of: {', '.join(SCOPES)}")
    if not 1 <= days <= max_days:
        raise TokenError(f"a token expires after 1 to {max_days} days")
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise TokenError("give the token a name of 1 to 100 characters")
    secret = PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=secret[:12],
                                    digest=digest(secret), scopes=scopes,
                                    expires_at=timezone.now() + timedelta(days=days))
    return token, secret


def authenticate(secret: str) -> ApiToken | None:
    """The active token with this secret, or None (unknown, revoked, expired, or its
    user deactivated)."""
    if not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    token = (ApiToken.objects.select_related("user").filter(digest=digest(secret)).first())
    if token is None or not token.active or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def tokens_of(user):
    return ApiToken.objects.filter(user=user)


def revoke(user, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False if it is not theirs or already revoked."""
    with transaction.atomic():
        return bool(ApiToken.objects.filter(user=user, pk=token_id, revoked_at__isnull=True)
                    .update(revoked_at=timezone.now()))
