"""Who is calling and what they may do: a personal token (Authorization: Bearer) or
the browser's session, which must then pass Django's CSRF check on unsafe methods.

The caller's scopes end up on `request.api_scopes`: a token's own, or every scope for
a session (a logged-in user in the browser may do what the pages let them). The
permission rules themselves stay in runs/selectors.py and the services."""

from __future__ import annotations

from django.conf import settings
from ninja.errors import AuthenticationError, HttpError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from runs import selectors
from runs.api import tokens
from runs.api.models import SCOPES


class TokenAuth(HttpBearer):
    def authenticate(self, request, token):
        found = tokens.authenticate(token)
        if found is None:
            # a wrong token is an error of its own, not a fall-back to the session
            raise AuthenticationError()
        request.api_scopes = frozenset(found.scopes)
        request.api_token = found
        request.user = found.user
        return found.user


class SessionAuth(APIKeyCookie):
    """The session cookie, with the CSRF check for POST and friends."""

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request):
        key = request.COOKIES.get(self.param_name)
        if key and not getattr(request, "_ninja_csrf_exempt", False) \
                and check_csrf(request) is not None:
            raise HttpError(403, "CSRF check failed: send the csrftoken cookie's value in "
                                 "X-CSRFToken (or use a token: Authorization: Bearer ...)")
        return key

    def authenticate(self, request, key):
        if key and request.user.is_authenticated:
            request.api_scopes = frozenset(SCOPES)
            return request.user
        return None


AUTH = [TokenAuth(), SessionAuth()]


def need(request, scope: str) -> None:
    """The caller's token carries `scope` (a session carries them all)."""
    if scope not in getattr(request, "api_scopes", ()):
        raise HttpError(403, f"this token lacks the {scope!r} scope")


def need_operator(request) -> None:
    """An operator (the pages' rule, selectors.can_see_all), through an 'operate' token."""
    need(request, "operate")
    if not selectors.can_see_all(request.auth):
        raise HttpError(403, "operators only: you do not have the permission to operate runs")
