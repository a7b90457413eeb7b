"""Small helpers shared by the sandbox views: JSON answers and query parameters."""

import functools
import os

from django.http import JsonResponse

from .errors import InvalidParam, SandboxError


def api(view):
    """Answer a SandboxError raised by ``view`` as its JSON error body and status."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except SandboxError as error:
            return JsonResponse(error.as_body(), status=error.status)

    return wrapper


def _raw(request, name: str, header: str | None = None) -> str | None:
    value = request.GET.get(name)
    if value is None and header:
        value = request.headers.get(header)
    return value


def int_param(request, name, default, *, low, high, header=None, env=None) -> int:
    """An integer from the query string (or a header, or an env default), in [low, high]."""
    raw = _raw(request, name, header)
    if raw is None and env:
        raw = os.environ.get(env)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParam(f"{name} must be an integer, not {raw!r}", param=name) from None
    if not low <= value <= high:
        raise InvalidParam(f"{name} must be between {low} and {high}", param=name)
    return value


def float_param(request, name, default, *, low, high, env=None) -> float:
    """A number from the query string (or an env default), in [low, high]."""
    raw = _raw(request, name)
    if raw is None and env:
        raw = os.environ.get(env)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidParam(f"{name} must be a number, not {raw!r}", param=name) from None
    if not low <= value <= high:
        raise InvalidParam(f"{name} must be between {low} and {high}", param=name)
    return value
