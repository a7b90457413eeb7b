"""The 400 handler (handler400): a post over DATA_UPLOAD_MAX_MEMORY_SIZE is refused by
Django before any view runs (the CSRF check reads the form). A view that can say so
on its own form offers a `too_large` hook and answers itself; any other page gets a
styled page that says what happened, never a bare "Bad Request (400)"."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.views import defaults


def bad_request(request, exception):
    if not isinstance(exception, RequestDataTooBig):
        return defaults.bad_request(request, exception, template_name="400.html")
    try:
        match = resolve(request.path_info)
    except Resolver404:
        match = None
    hook = getattr(match.func, "too_large", None) if match else None
    if hook is not None:
        return hook(request, *match.args, **match.kwargs)
    return render(request, "413.html", {"limit": settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
                  status=413)
