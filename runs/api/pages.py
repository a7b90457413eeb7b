"""The user's own page of API tokens: make one (its secret shown once, on the answer
to the POST that made it, never stored), see them, revoke one."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from runs.api import tokens
from runs.api.forms import TokenForm


@login_required
@require_http_methods(["GET", "POST"])
def tokens_page(request):
    form = TokenForm(request.POST or None)
    created = secret = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                created, secret = tokens.create(
                    request.user, name=data["name"], scopes=data["scopes"], days=data["days"],
                    max_days=settings.AGENTOPS["API_TOKEN_MAX_DAYS"])
            except tokens.TokenError as exc:
                form.add_error(None, str(exc))
                status = 400
            else:
                status = 201
                form = TokenForm()
        else:
            status = 400
    context = {"form": form, "tokens": tokens.tokens_of(request.user), "created": created,
               "secret": secret, "api_url": request.build_absolute_uri("/api/v1/")}
    response = render(request, "api/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"  # the page may hold a secret
    return response


@login_required
@require_POST
def revoke(request, token_id: int):
    if tokens.revoke(request.user, token_id):
        messages.success(request, "Token revoked: requests with it are refused from now on.")
    else:
        messages.error(request, "No such token of yours, or it was already revoked.")
    return redirect("api_tokens")
