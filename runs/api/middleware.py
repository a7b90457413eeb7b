"""Under /api/v1/ every error is JSON (docs/api.md), whoever answered it.

The API's own handlers (runs/api/api.py) answer what reaches an endpoint. Some answers
are made before or around one, as HTML or plain text: the URL resolver's 404 for a path
no endpoint has, django-ninja's 405 for a method an endpoint lacks, Django's handler400
(a body over DATA_UPLOAD_MAX_MEMORY_SIZE read outside an endpoint) and handler500.
This middleware, outside the others, turns such an answer into {"detail": ...} with the
same status and headers (Allow, Retry-After, ...), so a client never parses a page."""

from __future__ import annotations

from http import HTTPStatus

from django.http import JsonResponse

API_PREFIX = "/api/v1/"
JSON_TYPES = ("application/json", "application/problem+json")


def is_json(response) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip().lower() in JSON_TYPES


def message(request, response) -> str:
    status = response.status_code
    if status == 404:
        return f"no such endpoint: {request.path} (the endpoints: {API_PREFIX}docs)"
    if status == 405:
        return (f"method {request.method} not allowed here; allowed: "
                f"{response.get('Allow', '') or 'none'}")
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return response.reason_phrase


class ApiErrorsAreJsonMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (response.status_code < 400 or not request.path.startswith(API_PREFIX)
                or is_json(response) or response.streaming):
            return response
        json = JsonResponse({"detail": message(request, response)},
                            status=response.status_code)
        for name, value in response.items():
            if name.lower() not in ("content-type", "content-length"):
                json[name] = value
        json.cookies = response.cookies
        return json
