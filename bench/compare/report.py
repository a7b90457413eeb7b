"""The table as printed, as JSON, and as a PNG chart."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.compare.stats import Row


def fmt(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def cell(samples) -> str:
    if not samples.values:
        return "-"
    return f"{fmt(samples.median)} [{fmt(min(samples.values))}-{fmt(max(samples.values))}]"


def verdict(row: Row) -> str:
    if row.met is None:
        return ""
    return "MET" if row.met else "NOT MET"


def table(rows: list[Row]) -> str:
    header = ["#", "scenario", "metric", "agentops median [min-max]", "baseline",
              "baseline median [min-max]", "agentops/baseline", "target", "verdict"]
    lines = [[r.scenario, r.title, f"{r.metric} ({r.unit})", cell(r.ours), r.baseline_name,
              cell(r.baseline), f"{r.ratio:.3g}x" if r.ratio == r.ratio else "-",
              r.target_text, verdict(r)] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths)),
           "-+-".join("-" * w for w in widths)]
    out += [" | ".join(str(x).ljust(w) for x, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def write_json(path: Path, rows: list[Row], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = _no_nan({**meta, "rows": [r.as_dict() for r in rows]})
    path.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n")


def _no_nan(value):
    """JSON has no NaN: a ratio that could not be computed is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value


def write_png(path: Path, rows: list[Row], meta: dict) -> None:
    """One bar a row: how many times better agentops is than its baseline (log scale,
    > 1 is better whichever way the metric points), with the target as a tick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.ratio == r.ratio and r.ratio > 0]
    labels, advantages, targets, colors = [], [], [], []
    for r in shown:
        advantage = r.ratio if r.at_least else 1 / r.ratio
        labels.append(f"{r.scenario}. {r.metric} vs {r.baseline_name}\n{r.title}")
        advantages.append(advantage)
        if r.target is None:
            targets.append(None)
            colors.append("#8c8c8c")
        else:
            targets.append(r.target if r.at_least else 1 / r.target)
            colors.append("#2e7d32" if r.met else "#c62828")
    height = 0.55 * len(shown) + 1.8
    fig, ax = plt.subplots(figsize=(11, height))
    y = list(range(len(shown)))[::-1]
    ax.barh(y, advantages, color=colors, height=0.6, left=0)
    for yi, advantage, target, r in zip(y, advantages, targets, shown):
        if target is not None:
            ax.plot([target, target], [yi - 0.38, yi + 0.38], color="black", lw=2)
        ax.text(advantage * 1.08, yi, f"{advantage:.2g}x  ({fmt(r.ours.median)} vs "
                f"{fmt(r.baseline.median)} {r.unit})", va="center", fontsize=7.5)
    ax.set_xscale("log")
    ax.axvline(1, color="#444", lw=0.8, ls="--")
    lo = min(advantages + [t for t in targets if t] + [1]) / 3
    hi = max(advantages + [t for t in targets if t] + [1]) * 30
    ax.set_xlim(lo, hi)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7.5)
    ax.set_xlabel("times better than the baseline (log scale; > 1: agentops is better; "
                  "black tick: the target)")
    machine = meta.get("machine", {})
    postgres = machine.get("postgres", "").split(" (")[0]  # without the distribution's build
    ax.set_title(f"agentops vs DBOS / LangGraph, same PostgreSQL, same run - "
                 f"{machine.get('nproc', '?')} cores {machine.get('cpu', '')}, {postgres}\n"
                 "green: target met, red: not met, grey: reported only; medians of "
                 f"{meta.get('repetitions', '?')} alternating repetitions", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

