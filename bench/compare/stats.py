"""Samples, medians and the rows of the comparison table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Samples:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> float:
        self.values.append(value)
        return value

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def as_dict(self) -> dict:
        if not self.values:
            return {"n": 0}
        return {"median": self.median, "min": min(self.values), "max": max(self.values),
                "n": len(self.values), "samples": self.values}


@dataclass
class Row:
    """One line of the table: agentops against one baseline on one metric.

    `target` is the ratio agentops/baseline the issue asks for, `at_least` says
    whether the ratio must be at least (True) or at most (False) that.
    """

    scenario: str
    title: str
    metric: str
    unit: str
    ours: Samples
    baseline: Samples
    baseline_name: str
    target: float | None = None
    at_least: bool = True
    target_text: str = ""
    note: str = ""

    @property
    def ratio(self) -> float:
        if not self.ours.values or not self.baseline.values or not self.baseline.median:
            return float("nan")
        return self.ours.median / self.baseline.median

    @property
    def met(self) -> bool | None:
        if self.target is None or self.ratio != self.ratio:
            return None
        return self.ratio >= self.target if self.at_least else self.ratio <= self.target

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "title": self.title, "metric": self.metric,
                "unit": self.unit, "agentops": self.ours.as_dict(),
                "baseline": {"name": self.baseline_name, **self.baseline.as_dict()},
                "ratio_agentops_over_baseline": self.ratio, "target": self.target_text,
                "target_ratio": self.target, "target_at_least": self.at_least,
                "met": self.met, "note": self.note}
