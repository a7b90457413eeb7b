"""The NinjaAPI instance: /api/v1/, its OpenAPI document and Swagger UI, and how
errors look (always {"detail": text}, with "errors" for a 422 of the request's shape).

Engine refusals map by class: bad input 422, a state that does not allow it 409,
something that is not there 404. A database fault is a 503 with Retry-After, as on
the pages."""

from __future__ import annotations

import logging

from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.openapi.docs import Swagger

from runs.api.auth import AUTH
from runs.api.parsing import GuardedJSONParser
from runs.durable import errors as e
from runs.web import untrusted
from runs.web.middleware import RETRY_AFTER_SECONDS
from runs.worker.db import DATABASE_FAULTS

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
    docs=Swagger(settings={"persistAuthorization": False}),
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


@api.exception_handler(HttpError)
def http_error(request, exc):
    cause = exc.__cause__
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


import runs.api.endpoints  # noqa: E402,F401  (registers the operations)
import runs.api.operate  # noqa: E402,F401
import runs.api.stream  # noqa: E402,F401
