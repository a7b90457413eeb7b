"""The API's refusals as exceptions, one class per kind, each with the server's words."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, detail: str, errors: list | None = None):
        self.status = status
        self.detail = detail
        self.errors = errors or []
        super().__init__(f"{status}: {detail}")


class InvalidRequest(ApiError):
    """400 or 422: the request's shape or content was refused; nothing changed."""


class AuthenticationFailed(ApiError):
    """401: no token, or one that is unknown, revoked or expired."""


class Forbidden(ApiError):
    """403: the token lacks a scope, or the user may not do this."""


class NotFound(ApiError):
    """404: no such run (or not one of yours), agent, checkpoint or effect."""


class Conflict(ApiError):
    """409: the run's state does not allow this now (or the key is in use meanwhile)."""


class Unavailable(ApiError):
    """503 or a server that cannot be reached: worth trying again."""


BY_STATUS = {400: InvalidRequest, 401: AuthenticationFailed, 403: Forbidden, 404: NotFound,
             409: Conflict, 422: InvalidRequest, 502: Unavailable, 503: Unavailable,
             504: Unavailable}


def error_for(status: int, body) -> ApiError:
    detail = body.get("detail") if isinstance(body, dict) else None
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(detail, str):
        detail = str(body)[:500] if body else f"HTTP {status}"
    return BY_STATUS.get(status, ApiError)(status, detail, errors)
