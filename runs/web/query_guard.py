"""Refuses NUL characters in what reaches queries without a form in between.

PostgreSQL cannot hold a NUL in a text parameter and raises DataError (a 500), where
SQLite quietly matches nothing. Pages read some query parameters straight into
filters (the run list's status and agent, cursors), and the admin's list filters,
search and action checkboxes take any parameter name, so the rule sits here, before
any view or query: a NUL anywhere in the path or the query string is a 400, and so is
one in the admin's POST data. The project's own POST forms refuse NUL next to the
field instead (Django's CharField validator, runs/web/untrusted.py for JSON fields).
"""

from __future__ import annotations

from django.http import HttpResponseBadRequest, JsonResponse

from runs.web.untrusted import UntrustedInputError, check_text


def _check_params(params, where: str) -> None:
    for key, values in params.lists():
        check_text(key, f"the name of a {where}")
        for value in values:
            check_text(value, f"the {where} {key[:40]!r}")


class RefuseNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        try:
            check_text(request.path, "the URL path")
            _check_params(request.GET, "query parameter")
            if request.resolver_match.namespace == "admin" and request.method == "POST":
                _check_params(request.POST, "form field")
        except UntrustedInputError as exc:
            if request.path.startswith("/api/"):  # the API's errors are JSON (docs/api.md)
                return JsonResponse({"detail": f"{exc}."}, status=400)
            return HttpResponseBadRequest(f"{exc}.", content_type="text/plain; charset=utf-8")
        return None
