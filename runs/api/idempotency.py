"""Idempotency-Key on POST /api/v1/runs (the IETF httpapi idempotency-key draft).

The first request with a key records (user, key, digest of the body, a run id chosen
now) and then launches under that id; a later one with the same key and body gets
that run, for API_IDEMPOTENCY_HOURS; the same key with another body is a 422. The run
id is fixed before the launch, so a launch that died between the record and the run
is completed by the retry, with the same id, instead of stranding the key."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.api.models import IdempotentLaunch
from runs.models import Run

KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII: the draft's key is a string


class KeyError_(Exception):
    """The key cannot be used for this request; `status` says how (400, 409, 422)."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


@dataclass
class Claim:
    run_id: str
    replay: bool  # the run exists: answer with it, launch nothing


def request_digest(agent: str, inputs) -> str:
    body = json.dumps({"agent": agent, "inputs": inputs}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _window() -> timedelta:
    return timedelta(hours=settings.AGENTOPS["API_IDEMPOTENCY_HOURS"])


def claim(user, key: str, digest: str) -> Claim:
    if not KEY.match(key):
        raise KeyError_(400, "Idempotency-Key must be 1 to 255 visible ASCII characters")
    cutoff = timezone.now() - _window()
    for _ in range(3):
        found = IdempotentLaunch.objects.filter(user=user, key=key).first()
        if found is not None and found.created_at < cutoff:
            IdempotentLaunch.objects.filter(pk=found.pk, created_at=found.created_at).delete()
            found = None
        if found is not None:
            if found.request_digest != digest:
                raise KeyError_(422, "this Idempotency-Key was used with another request body; "
                                     "use a new key for a new launch")
            return Claim(found.run_id, replay=Run.objects.filter(pk=found.run_id).exists())
        try:
            with transaction.atomic():
                made = IdempotentLaunch.objects.create(user=user, key=key, request_digest=digest,
                                                       run_id=uuid.uuid4().hex)
        except IntegrityError:
            continue  # another request made it meanwhile: read theirs
        return Claim(made.run_id, replay=False)
    raise KeyError_(409, "a request with this Idempotency-Key is in progress; try again")


def forget(user, key: str, run_id: str) -> None:
    """The launch was refused (bad inputs): the key is free again for a corrected body."""
    IdempotentLaunch.objects.filter(user=user, key=key, run_id=run_id).delete()


def prune() -> int:
    """Drop records past the window (called from the launches themselves, cheaply)."""
    cutoff = timezone.now() - _window()
    return IdempotentLaunch.objects.filter(created_at__lt=cutoff).delete()[0]
