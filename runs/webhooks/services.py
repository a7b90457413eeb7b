"""Writes of subscriptions."""

from __future__ import annotations

from django.utils import timezone

from .models import Subscription, new_secret

EDITABLE = ("url", "description", "events", "scope", "active")


def subscription_create(*, user, data: dict) -> Subscription:
    return Subscription.objects.create(owner=user, created_at=timezone.now(),
                                       **{k: data[k] for k in EDITABLE if k in data})


def subscription_update(*, subscription: Subscription, data: dict) -> Subscription:
    for key in EDITABLE:
        if key in data:
            setattr(subscription, key, data[key])
    subscription.save(update_fields=[k for k in EDITABLE if k in data])
    return subscription


def subscription_rotate_secret(*, subscription: Subscription) -> Subscription:
    """A new signing secret; deliveries already waiting to retry are signed with it."""
    subscription.secret = new_secret()
    subscription.save(update_fields=["secret"])
    return subscription


def subscription_delete(*, subscription: Subscription) -> None:
    subscription.delete()
