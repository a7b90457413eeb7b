"""Request bodies go through the same guards as the pages' JSON fields
(runs/web/untrusted.py): size, depth, NUL characters, lone surrogates and non-finite
numbers are refused with a 400 that says which, before pydantic sees the body."""

from __future__ import annotations

from django.conf import settings
from ninja.parser import Parser

from runs.web import untrusted

BODY_OVERHEAD = 64 * 1024  # the envelope around the inputs (agent name, reason, ...)


class GuardedJSONParser(Parser):
    def parse_body(self, request):
        limit = settings.AGENTOPS["MAX_INPUT_BYTES"] + BODY_OVERHEAD
        return untrusted.parse_json_bytes(request.body, max_bytes=limit)
