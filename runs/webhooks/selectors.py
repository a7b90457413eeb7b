"""Reads of subscriptions, with the one permission rule: a user sees their own
subscriptions, an operator every one; any other is a 404. Which events a subscription
receives (own runs, or every run for an operator's "all") is dispatch.py's rule, built
on runs.selectors.can_see_all like this one."""

from __future__ import annotations

from django.db.models import Prefetch
from django.http import Http404

from runs.selectors import can_see_all

from .models import Attempt, Subscription

DELIVERIES_SHOWN = 50


def visible_subscriptions(user):
    if can_see_all(user):
        return Subscription.objects.select_related("owner")
    if not (user and user.is_authenticated):
        return Subscription.objects.none()
    return Subscription.objects.filter(owner=user).select_related("owner")


def subscription_get_for_user(user, pk: int) -> Subscription:
    subscription = visible_subscriptions(user).filter(pk=pk).first()
    if subscription is None:
        raise Http404("No such subscription.")
    return subscription


def recent_deliveries(subscription: Subscription, limit: int = DELIVERIES_SHOWN):
    """The latest deliveries, each with its attempts in order."""
    return list(subscription.deliveries.prefetch_related(
        Prefetch("attempt_rows", queryset=Attempt.objects.order_by("number")))[:limit])


def may_subscribe_to_all(user) -> bool:
    return can_see_all(user)


