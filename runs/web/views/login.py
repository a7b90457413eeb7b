"""The login page when django-axes has locked a username out from an address."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import render


def lockout_message() -> str:
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    return (f"Too many failed logins for this username from your address: logins are "
            f"refused for {minutes} minutes. Ask an administrator if you need in sooner.")


def axes_username(request, credentials=None) -> str:
    """AXES_USERNAME_CALLABLE: the username an attempt is counted under. Django's login
    form checks no length, and axes keeps it in a 255-character column (a longer one was
    a 500 on PostgreSQL); no account's name is longer than the user model allows."""
    from django.contrib.auth import get_user_model

    username = (credentials or {}).get("username") or request.POST.get("username", "")
    limit = get_user_model()._meta.get_field(get_user_model().USERNAME_FIELD).max_length
    return str(username)[:limit]


def locked_out(request, original_response=None, credentials=None):
    """AXES_LOCKOUT_CALLABLE: the login page with the lockout said where errors go."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    form = AuthenticationForm(request, initial={"username": username})
    return render(request, "registration/login.html",
                  {"form": form, "lockout": lockout_message(),
                   "next": request.POST.get("next", request.GET.get("next", ""))}, status=429)
