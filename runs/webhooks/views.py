"""Webhook pages: a user's subscriptions, a subscription's page with its deliveries and
their attempts (status, clipped answer, time). Permission rules are selectors.py's."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from . import selectors, services
from .forms import SubscriptionForm


@login_required
def subscription_list(request):
    return render(request, "webhooks/list.html", {
        "subscriptions": selectors.visible_subscriptions(request.user),
        "all": selectors.may_subscribe_to_all(request.user)})


@login_required
@require_http_methods(["GET", "POST"])
def subscription_new(request):
    form = SubscriptionForm(data=request.POST or None,
                            may_subscribe_to_all=selectors.may_subscribe_to_all(request.user),
                            initial={"events": ["run.ended"], "active": True})
    if request.method == "POST" and form.is_valid():
        subscription = services.subscription_create(user=request.user, data=form.values())
        messages.success(request, "Subscription created. Its signing secret is below.")
        return redirect(subscription)
    status = 422 if request.method == "POST" else 200
    return render(request, "webhooks/detail.html", {"form": form, "subscription": None},
                  status=status)


@login_required
@require_http_methods(["GET", "POST"])
def subscription_detail(request, subscription_id: int):
    subscription = selectors.subscription_get_for_user(request.user, subscription_id)
    form = SubscriptionForm(data=request.POST or None, instance=subscription,
                            may_subscribe_to_all=selectors.may_subscribe_to_all(request.user))
    if request.method == "POST" and form.is_valid():
        services.subscription_update(subscription=subscription, data=form.values())
        messages.success(request, "Subscription saved.")
        return redirect(subscription)
    if request.method == "POST":
        subscription.refresh_from_db()
    return render(request, "webhooks/detail.html", {
        "form": form, "subscription": subscription,
        "deliveries": selectors.recent_deliveries(subscription),
        "show_secret": subscription.owner_id == request.user.pk,
    }, status=422 if request.method == "POST" else 200)


@login_required
@require_POST
def subscription_rotate(request, subscription_id: int):
    subscription = selectors.subscription_get_for_user(request.user, subscription_id)
    services.subscription_rotate_secret(subscription=subscription)
    messages.success(request, "A new signing secret is in use.")
    return redirect(subscription)


@login_required
@require_POST
def subscription_delete(request, subscription_id: int):
    subscription = selectors.subscription_get_for_user(request.user, subscription_id)
    services.subscription_delete(subscription=subscription)
    messages.success(request, "Subscription deleted.")
    return redirect("webhooks:list")
