"""URL converters for agentops' own identifiers."""
from django.urls import register_converter

from runs.web.untrusted import RUN_ID


class RunIdConverter:
    """A run ID: 1-32 URL-safe characters (the engine mints uuid4 hex).

    Matching only the characters an ID can hold makes any other path a 404 at
    routing, before a query is built: PostgreSQL refuses a NUL byte in a text
    parameter with an error, not an empty result.
    """

    regex = RUN_ID.pattern

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


# Registered when the app is ready, before any URLconf (pages, operator pages,
# websockets) is imported.
register_converter(RunIdConverter, "run_id")
