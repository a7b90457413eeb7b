"""The price table: dollars per million tokens, per model.

Rows of `ModelPrice` (the admin edits them) win over AGENTOPS["MODEL_PRICES"] in the
settings, which ships a price for the sandbox's scripted model so that the ledger
and budgets work offline. Workers read the table at most every PRICE_CACHE_SECONDS:
a price edit applies to calls made after that, never to calls already logged
(their cost is written on their effect)."""

from __future__ import annotations

import threading
import time

from django.conf import settings

PRICE_CACHE_SECONDS = 5.0
_cache: dict = {"at": -1e9, "table": {}}
_lock = threading.Lock()


def table() -> dict[str, tuple[float, float]]:
    """model -> (prompt, completion) dollars per million tokens."""
    with _lock:
        if time.monotonic() - _cache["at"] < PRICE_CACHE_SECONDS:
            return _cache["table"]
    from .models import ModelPrice

    merged = {model: (float(p["prompt"]), float(p["completion"]))
              for model, p in settings.AGENTOPS["MODEL_PRICES"].items()}
    for row in ModelPrice.objects.all():
        merged[row.model] = (float(row.prompt_per_million), float(row.completion_per_million))
    with _lock:
        _cache.update(at=time.monotonic(), table=merged)
    return merged


def forget() -> None:
    """After an edit in this process (the admin): the next call reads the table."""
    with _lock:
        _cache["at"] = -1e9


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    """The cost of one call in dollars (WorkerConfig.price)."""
    prompt, completion = table().get(model, (0.0, 0.0))
    return (prompt_tokens * prompt + completion_tokens * completion) / 1_000_000
