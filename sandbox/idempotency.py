"""The records API: an idempotent write, after the IETF Idempotency-Key draft.

For one key, the first request claims the key by inserting its row in state
``processing`` (committed at once, so the unique constraint on ``key`` decides
any race), does the work, then stores its response in the same transaction
as the record. A later request with the same key and body gets that response
again (``replayed``); with another body, 422; while the first is still in
progress, 409. A claim older than ``stale_seconds`` (its request died with the
process) may be taken over; finishing is conditional on the claim token, so
the request that lost its claim cannot write a record afterwards.
"""

import hashlib
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from runs.web.untrusted import UntrustedInputError, parse_json_bytes

from .dataset import canonical_json
from .errors import (
    IdempotencyKeyReused,
    InvalidBody,
    InvalidIdempotencyKey,
    MissingIdempotencyKey,
    RequestInProgress,
    SimulatedFailure,
)
from .models import IdempotencyKey, KeyCall, Record

MAX_KEY_LENGTH = 255
FAIL_MODES = {"before", "after"}


def stale_seconds() -> float:
    return float(os.environ.get("AGENTOPS_SANDBOX_STALE_SECONDS", "120"))


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict
    replayed: bool = False


def body_digest(payload: dict) -> str:
    """SHA-256 of the canonical JSON: key order and spacing do not matter."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def parse_payload(raw: bytes) -> dict:
    try:
        payload = parse_json_bytes(raw or b"", max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    except UntrustedInputError as exc:
        raise InvalidBody(f"the body is {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidBody("the body must be a JSON object")
    return payload


def record_post(
    *, key: str, raw_body: bytes, delay_seconds: float = 0.0, fail: str = ""
) -> Outcome:
    """Handle one POST of the records API; raises a SandboxError for 4xx/5xx answers.

    ``fail="before"`` answers 503 without doing anything (the key is released);
    ``fail="after"`` writes the record, then answers 503 as if the response had
    been lost, so a caller's retry with the same key must get the replay.
    """
    if not key:
        raise MissingIdempotencyKey("the Idempotency-Key header is required")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(f"the Idempotency-Key header is longer than {MAX_KEY_LENGTH}")
    _count_call(key)
    try:
        payload = parse_payload(raw_body)
    except InvalidBody:
        _count_outcome(key, "rejected")
        raise
    digest = body_digest(payload)
    token = uuid.uuid4().hex
    if not _claim(key, digest, token):
        replay = _answer_existing(key, digest, token)
        if replay is not None:
            return replay
    return _perform(key, payload, token, delay_seconds, fail)


def _claim(key: str, digest: str, token: str) -> bool:
    """Insert the key's row, committed at once; False if the key is already taken."""
    try:
        with transaction.atomic():
            IdempotencyKey.objects.create(
                key=key, request_digest=digest, claim_token=token, claimed_at=timezone.now()
            )
    except IntegrityError:
        return False  # the unique constraint says: another request has this key
    return True


def _answer_existing(key: str, digest: str, token: str) -> Outcome | None:
    """The answer for a key already claimed, or None once the key is ours after all
    (released by a failed claimant, or a stale claim taken over)."""
    for _ in range(3):
        row = IdempotencyKey.objects.filter(key=key).first()
        if row is not None:
            break
        # The claimant failed and released the key between our insert and read.
        if _claim(key, digest, token):
            return None
    else:
        _count_outcome(key, "conflicts")
        raise RequestInProgress("the key is being claimed and released; retry later", key=key)
    if row.request_digest != digest:
        _count_outcome(key, "mismatches")
        raise IdempotencyKeyReused(
            "this Idempotency-Key was already used with a different request body", key=key
        )
    if row.state == IdempotencyKey.DONE:
        _count_outcome(key, "replays")
        return Outcome(row.response_status, row.response_body, replayed=True)
    if _take_over_stale(row, token):
        return None
    _count_outcome(key, "conflicts")
    raise RequestInProgress("a request with this Idempotency-Key is still being processed", key=key)


def _take_over_stale(row: IdempotencyKey, token: str) -> bool:
    if row.claimed_at > timezone.now() - timedelta(seconds=stale_seconds()):
        return False
    # Conditional on the old token: of several requests that find the same stale
    # claim, exactly one takes it over.
    return (
        IdempotencyKey.objects.filter(
            pk=row.pk, state=IdempotencyKey.PROCESSING, claim_token=row.claim_token
        ).update(claim_token=token, claimed_at=timezone.now())
        == 1
    )


def _perform(key: str, payload: dict, token: str, delay_seconds: float, fail: str) -> Outcome:
    try:
        if fail == "before":
            raise SimulatedFailure("failed before doing anything, as asked", key=key)
        time.sleep(delay_seconds)  # the "work": lets a test overlap two requests
        body = _finish(key, payload, token)
    except BaseException:
        # Release the key so that a retry can do the work (the draft: a failed
        # request must not leave the key locked).
        IdempotencyKey.objects.filter(
            key=key, claim_token=token, state=IdempotencyKey.PROCESSING
        ).delete()
        raise
    if fail == "after":
        raise SimulatedFailure(
            "the record was written but this response is lost, as asked", key=key
        )
    return Outcome(201, body)


def _finish(key: str, payload: dict, token: str) -> dict:
    """Write the record and the stored response in one transaction."""
    with transaction.atomic():
        finished = IdempotencyKey.objects.filter(
            key=key, claim_token=token, state=IdempotencyKey.PROCESSING
        ).update(state=IdempotencyKey.DONE, completed_at=timezone.now())
        if finished != 1:
            # Our claim went stale and another request took it over.
            raise RequestInProgress("this request lost its claim on the key", key=key)
        unit = payload.get("unit")
        record = Record.objects.create(
            key=key, payload=payload, unit=str(unit)[:255] if unit is not None else ""
        )
        body = {"id": record.pk, "key": key, "payload": payload}
        IdempotencyKey.objects.filter(key=key).update(response_status=201, response_body=body)
    return body


def _count_call(key: str) -> None:
    now = timezone.now()
    if KeyCall.objects.filter(key=key).update(calls=F("calls") + 1, last_seen=now):
        return
    try:
        with transaction.atomic():
            KeyCall.objects.create(key=key, calls=1, first_seen=now, last_seen=now)
    except IntegrityError:
        # Another first call for this key inserted the row after our update.
        KeyCall.objects.filter(key=key).update(calls=F("calls") + 1, last_seen=now)


def _count_outcome(key: str, counter: str) -> None:
    KeyCall.objects.filter(key=key).update(**{counter: F(counter) + 1})
