"""Recovery latency: from a fault to the next new effect of each run it hit.

A run the operator touched (paused, rolled back, cancelled ...) between the fault and
its recovery is left out of the figures: its wait was the operator's, not the engine's.
A run that had no effect left to make (the fault struck its last step) counts its
recovery at the next claim by a newer epoch, or its final status event.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def recoveries(faults, data) -> list[dict]:
    found = []
    for fault in faults:
        for run_id in fault.runs:
            d = data.get(run_id)
            if d is None:
                continue
            found.append(_recovery(fault, d))
    return found


def _recovery(fault, d) -> dict:
    at = fault.at
    row = {"kind": fault.kind, "run": d.run.id, "latency": None, "how": ""}
    finished = _ts(d.run.finished_at)
    if finished is not None and finished < at:
        row["how"] = "finished before the fault"
        return row
    effect = min((t for t in (_ts(e.started_at) for e in d.effects) if t and t > at),
                 default=None)
    epoch = fault.epochs.get(d.run.id, 0)
    claim = min((_ts(e.created_at) for e in d.events if e.kind == "status"
                 and e.created_at.timestamp() > at
                 and ((e.data.get("epoch") or 0) > epoch
                      or e.data.get("status") in ("succeeded", "failed", "cancelled"))),
                default=None)
    recovered, how = (effect, "next effect") if effect is not None else (claim, "next claim")
    if recovered is None:
        row["how"] = "never recovered"
        return row
    touched = [a for a in d.audits if at <= a.created_at.timestamp() <= recovered
               and a.actor != "chaos-user"]
    if touched:
        row["how"] = f"operator {touched[0].action} in between"
        return row
    row["latency"], row["how"] = recovered - at, how
    row["agent"] = d.run.agent
    # what the run went through meanwhile, so that a slow one explains itself
    row["between"] = [f"+{e.created_at.timestamp() - at:.2f} s {_describe(e.data)}"
                      for e in d.events if e.kind == "status"
                      and at < e.created_at.timestamp() <= recovered]
    return row


def _describe(data: dict) -> str:
    extra = ", ".join(f"{k} {data[k]}" for k in ("kind", "reason", "after", "epoch", "worker")
                      if data.get(k) not in (None, ""))
    return f"{data.get('status', '?')}" + (f" ({extra})" if extra else "")


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(p / 100 * len(ordered)) - 1)
    return ordered[rank]


def summary(rows: list[dict]) -> dict:
    by_kind: dict[str, list[float]] = {}
    for row in rows:
        if row["latency"] is not None:
            by_kind.setdefault(row["kind"], []).append(row["latency"])
    table = {kind: _stats(values) for kind, values in sorted(by_kind.items())}
    table["all"] = _stats([v for values in by_kind.values() for v in values])
    return table


def _stats(values: list[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "max": max(values) if values else None}


def never_recovered(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["how"] == "never recovered"]


def now_utc() -> datetime:
    return datetime.now(UTC)
