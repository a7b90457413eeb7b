"""Request bodies are JSON, said so by their Content-Type, and go through the same
guards as the pages' JSON fields (runs/web/untrusted.py): size, depth, NUL characters,
lone surrogates and non-finite numbers are refused with an error that says which,
before pydantic sees the body.

A body sent as anything but `application/json` (or a `+json` type) is refused (415)
rather than guessed at: a `text/plain` or form body that happens to parse as JSON was
not meant as JSON by its sender (and text/plain is what a cross-site form may send
without a preflight)."""

from __future__ import annotations

from django.conf import settings
from ninja.parser import Parser

from runs.web import untrusted

BODY_OVERHEAD = 64 * 1024  # the envelope around the inputs (agent name, reason, ...)


class UnsupportedMediaTypeError(ValueError):
    """A request body whose Content-Type is not JSON's."""


def is_json_media_type(media_type: str) -> bool:
    media_type = media_type.strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json"))


class GuardedJSONParser(Parser):
    def parse_body(self, request):
        if not is_json_media_type(request.content_type or ""):
            sent = request.content_type or "no Content-Type"
            raise UnsupportedMediaTypeError(f"the request body must be JSON sent as "
                                            f"Content-Type: application/json, not {sent}")
        limit = settings.AGENTOPS["MAX_INPUT_BYTES"] + BODY_OVERHEAD
        return untrusted.parse_json_bytes(request.body, max_bytes=limit)
