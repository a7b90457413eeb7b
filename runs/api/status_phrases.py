"""A reason phrase for every status the app answers with, in Daphne's status lines.

Daphne writes responses through Twisted, whose status line takes its phrase from
`twisted.web.http.RESPONSES` and says "Unknown Status" for a code missing there: 422
(the API's refusal of a request's content), 429, 451 and a few more. An ASGI response
carries no phrase (the spec has no field for one), so the table is the one place it can
come from: filled here from the standard library's `http.HTTPStatus`, leaving every
phrase Twisted has as it is. Called by agentops/asgi.py, which Daphne loads (and
`runserver` with it) before it serves a request."""

from __future__ import annotations

from http import HTTPStatus


def complete_twisted_phrases() -> None:
    try:
        from twisted.web import http
    except ImportError:  # served by another ASGI server, which writes its own phrases
        return
    for status in HTTPStatus:
        http.RESPONSES.setdefault(status.value, status.phrase.encode("ascii"))
