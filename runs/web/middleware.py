"""A request that meets a database fault gets a 503 that says so, never a 500.

Connections are checked before a request uses them (CONN_HEALTH_CHECKS, or the
pooled engine's check: agentops/pooled_postgresql), so a terminated connection or a restarted database costs a
request nothing once a new connection can be had. What is left is a request
in flight at the moment of the fault, or one made while the database is down:
it is told to come back (Retry-After; a page reloads by itself).
"""

import logging

from django.http import HttpResponse
from django.template.loader import render_to_string

from runs.db_faults import DATABASE_FAULTS

logger = logging.getLogger("agentops.web")

RETRY_AFTER_SECONDS = 2


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, DATABASE_FAULTS):
            return None
        logger.warning("%s %s: database unavailable: %s", request.method, request.path, exception)
        # No request context: rendering it would read the session, from the database.
        body = render_to_string("503.html", {"retry": request.method in ("GET", "HEAD"),
                                             "retry_after": RETRY_AFTER_SECONDS})
        response = HttpResponse(body, status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
