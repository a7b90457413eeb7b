"""The ledger's engine side: a metered call's usage and cost, summed on the run.

A metered tool (`@tool(meter=...)`, a model call) reports its usage from its result;
the worker's price function (`WorkerConfig.price`, the price table on the Django
side: runs/budgets/prices.py) turns tokens into dollars when the outcome is logged.
The usage is written on the effect and added to the run's totals in the same commit,
so a replay (which returns the logged result) never counts it again. See
docs/budgets.md.
"""

from __future__ import annotations

import math

TOTAL_KEYS = ("cost", "prompt_tokens", "completion_tokens", "calls")


def _tokens(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def measure(tool, result, arguments: dict, price) -> dict | None:
    """The call's usage record, or None when the tool reports none. A meter that
    fails is a bug of the tool, not a reason to lose a result the world returned:
    the call is recorded without usage."""
    try:
        reported = tool.meter(result, arguments)
    except Exception:  # noqa: BLE001 - see above
        return None
    if not isinstance(reported, dict):
        return None
    model = str(reported.get("model") or "")[:200]
    prompt = _tokens(reported.get("prompt_tokens"))
    completion = _tokens(reported.get("completion_tokens"))
    cost = float(price(model, prompt, completion)) if price is not None else 0.0
    if not math.isfinite(cost) or cost < 0:
        cost = 0.0
    return {"model": model, "prompt_tokens": prompt, "completion_tokens": completion,
            "cost": round(cost, 10)}


def added(totals: dict | None, usage: dict) -> dict:
    """The run's totals with one more call."""
    totals = dict(totals or {})
    totals["cost"] = round(float(totals.get("cost") or 0) + usage["cost"], 10)
    for key in ("prompt_tokens", "completion_tokens"):
        totals[key] = int(totals.get(key) or 0) + usage[key]
    totals["calls"] = int(totals.get("calls") or 0) + 1
    return totals
