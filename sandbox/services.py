"""Writes of the sandbox other than the records protocol (see idempotency.py)."""

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from .models import IdempotencyKey, KeyCall, Notification, PageHit, Record, SiteGeneration

ALL_MODELS = (IdempotencyKey, Record, KeyCall, Notification, SiteGeneration, PageHit)


def notification_create(*, body: dict, idempotency_key: str = "") -> tuple[Notification, int]:
    """Store one notification (never deduplicated); returns it and the total so far."""
    unit = body.get("unit")
    notification = Notification.objects.create(
        body=body,
        unit=str(unit)[:255] if unit is not None else "",
        idempotency_key=idempotency_key[:255],
    )
    return notification, Notification.objects.count()


def generation_bump() -> int:
    """Move the site to its next generation; returns the new generation."""
    with transaction.atomic():
        SiteGeneration.objects.get_or_create(pk=1)
        # F() makes the increment atomic in the database: two bumps give +2.
        SiteGeneration.objects.filter(pk=1).update(
            generation=F("generation") + 1, bumped_at=timezone.now()
        )
        return SiteGeneration.objects.get(pk=1).generation


def page_hit(page: int) -> int:
    """Count one request of a flaky page; returns how many it has had, this one included."""
    for _ in range(2):
        with transaction.atomic():
            # The update locks the row until commit, so the count read back is ours.
            if PageHit.objects.filter(page=page).update(hits=F("hits") + 1):
                return PageHit.objects.get(page=page).hits
        try:
            with transaction.atomic():
                PageHit.objects.create(page=page, hits=1)
            return 1
        except IntegrityError:
            continue  # a concurrent first request created the row: count on it
    raise RuntimeError(f"could not count a hit of page {page}")


def sandbox_reset() -> dict[str, int]:
    """Delete every sandbox row; returns how many rows of each model went."""
    deleted = {}
    with transaction.atomic():
        for model in ALL_MODELS:
            deleted[model.__name__], _ = model.objects.all().delete()
    return deleted
