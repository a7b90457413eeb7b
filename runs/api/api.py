"""The NinjaAPI instance: /api/v1/, its OpenAPI document and Swagger UI, and how
errors look (always {"detail": text}, with "errors" for a 422 of the request's shape).

Engine refusals map by class: bad input 422, a state that does not allow it 409,
something that is not there 404. A body over the limit is a 413, one that is not
application/json a 415, one that is not clean JSON a 400. A database fault is a 503 with
Retry-After, as on the pages. What no handler here answers (an unknown path, a method
an endpoint lacks, a 500) is made JSON by runs/api/middleware.py."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError

from runs.api import approvals, chat, deploys, endpoints, operate, stream
from runs.api.auth import AUTH
from runs.api.docs import SwaggerUI
from runs.api.parsing import GuardedJSONParser, UnsupportedMediaTypeError
from runs.db_faults import DATABASE_FAULTS
from runs.durable import errors as e
from runs.web import untrusted
from runs.web.middleware import RETRY_AFTER_SECONDS

logger = logging.getLogger("agentops.api")

class AgentopsAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation) -> str:
        return operation.view_func.__name__  # launch, get_run, ...: what the client calls


api = AgentopsAPI(
    title="agentops API",
    version="1",
    description="Launch, follow and operate durable agent runs. Authenticate with a personal "
                "token (Authorization: Bearer aop_..., made on /account/tokens/) or, in the "
                "browser, the session (with the X-CSRFToken header on POST). See docs/api.md.",
    urls_namespace="api",
    auth=AUTH,
    parser=GuardedJSONParser(),
    docs=SwaggerUI(settings={"persistAuthorization": False}),
    docs_url="/docs",
    openapi_url="/openapi.json",
)

NOT_FOUND = (e.RunNotFoundError, e.CheckpointNotFoundError, e.EffectNotFoundError)
BAD_INPUT = (e.InputValidationError, e.AgentNotFoundError, e.StateNotSerializableError,
             e.StateTooLargeError)


def detail(request, status: int, message: str, errors=None, **headers):
    body = {"detail": message}
    if errors is not None:
        body["errors"] = errors
    response = api.create_response(request, body, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


@api.exception_handler(e.DurableError)
def durable_error(request, exc):
    if isinstance(exc, NOT_FOUND):
        return detail(request, 404, str(exc))
    if isinstance(exc, BAD_INPUT):
        field = getattr(exc, "field", "") or ""
        errors = [{"loc": field.split(".") if field else [], "msg": str(exc)}]
        return detail(request, 422, f"{field}: {exc}" if field else str(exc), errors)
    return detail(request, 409, str(exc))  # a transition the run's state refuses


@api.exception_handler(Http404)
def not_found(request, exc):
    return detail(request, 404, str(exc) or "Not found.")


@api.exception_handler(ValidationError)
def validation_error(request, exc):
    errors = [{"loc": [str(part) for part in err.get("loc", ())], "msg": str(err.get("msg", "")),
               "type": str(err.get("type", ""))} for err in exc.errors]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(first["loc"][1:] or first["loc"]) or "request"
    return detail(request, 422, f"{where}: {first['msg']}", errors)


@api.exception_handler(PermissionDenied)
def permission_denied(request, exc):
    return detail(request, 403, str(exc) or "Forbidden.")


@api.exception_handler(RequestDataTooBig)
def body_too_large(request, exc):  # Django's own limit, met before the parser's
    return detail(request, 413, "the request body is refused: too large, at most "
                                f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")


@api.exception_handler(HttpError)
def http_error(request, exc):
    cause = exc.__cause__
    if isinstance(cause, UnsupportedMediaTypeError):
        return detail(request, 415, str(cause))
    if isinstance(cause, untrusted.TooLargeError):
        return detail(request, 413, f"the request body is refused: {cause}")
    if isinstance(cause, untrusted.UntrustedInputError):  # from GuardedJSONParser
        return detail(request, 400, f"the request body is refused: {cause}")
    if exc.status_code == 400 and cause is not None:
        return detail(request, 400, "the request body is not JSON")
    return detail(request, exc.status_code, str(exc))


def database_unavailable(request, exc):
    logger.warning("%s %s: database unavailable: %s", request.method, request.path, exc)
    return detail(request, 503, "the database is unavailable; try again shortly",
                  Retry_After=str(RETRY_AFTER_SECONDS))


for fault in DATABASE_FAULTS:
    api.add_exception_handler(fault, database_unavailable)


# Each module of operations has a router of its own, mounted here only: they import
# nothing of this module, so no module of the API imports one that imports it back.
# In this order the OpenAPI document lists the paths as it always has.
for operations in (endpoints, approvals, chat, deploys, operate, stream):
    api.add_router("", operations.router)
