"""The Grafana dashboard's main panels (docs/grafana-dashboard.json), drawn with
matplotlib from /metrics samples of a real run of the stack, the way Prometheus would
compute them: rates and quantiles from counter and bucket deltas between scrapes.

matplotlib comes with the `bench` extra; without it nothing is drawn."""

from __future__ import annotations

import math
from pathlib import Path

WINDOW = 5.0  # seconds a rate or a quantile is computed over (Grafana's $__rate_interval)


def _series(samples, name, group_by, **labels):
    """{group value: [values per sample]} of a metric summed within each group."""
    wanted = set(labels.items())
    groups: dict[str, list[float]] = {}
    for index, scrape in enumerate(samples):
        for (n, ls), value in scrape.samples.items():
            if n != name or not wanted <= ls:
                continue
            key = dict(ls).get(group_by, "") if group_by else name
            groups.setdefault(key, [0.0] * len(samples))[index] += value
    return groups


def _window_start(times, i):
    """The first sample of the window ending at sample i (at least the one before it)."""
    j = max(0, i - 1)
    while j > 0 and times[i] - times[j - 1] <= WINDOW:
        j -= 1
    return j


def _rate(times, values):
    out = []
    for i in range(len(times)):
        j = _window_start(times, i)
        dt = times[i] - times[j]
        out.append((values[i] - values[j]) / dt if dt > 0 else 0.0)
    return out


def _quantile(times, buckets: dict[str, list[float]], q: float):
    """histogram_quantile(q, rate(..._bucket[WINDOW])) per sample (NaN: no calls)."""
    bounds = sorted(buckets, key=lambda le: math.inf if le == "+Inf" else float(le))
    out = []
    for i in range(len(times)):
        j = _window_start(times, i)
        counts = [buckets[le][i] - buckets[le][j] for le in bounds]
        total = counts[-1] if counts else 0
        if total <= 0:
            out.append(math.nan)
            continue
        rank, previous_bound, previous_count = q * total, 0.0, 0.0
        value = math.nan
        for le, count in zip(bounds, counts):
            bound = math.inf if le == "+Inf" else float(le)
            if count >= rank:
                if bound == math.inf:
                    value = previous_bound
                else:
                    inside = count - previous_count
                    value = previous_bound + (bound - previous_bound) * (
                        (rank - previous_count) / inside if inside else 1.0)
                break
            previous_bound, previous_count = bound, count
        out.append(value)
    return out


def load(path: Path) -> list:
    """Samples saved by the live test (samples.json), to draw them again."""
    import json

    from tests.observability.stack import Scrape

    return [Scrape(at=s["at"], samples={(n, frozenset(ls.items())): v for n, ls, v in s["samples"]})
            for s in json.loads(path.read_text())]


def draw_panels(samples, path: Path, tool: str) -> bool:
    """`tool`: the one whose latency quantiles are drawn."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(samples) < 2:
        return False
    t0 = samples[0].at
    times = [s.at - t0 for s in samples]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), sharex=True)
    fig.suptitle("agentops: a live stack through a worker SIGKILL and an in-doubt effect "
                 "(/metrics scraped every 0.5 s)")

    ax = axes[0][0]
    for status, values in sorted(_series(samples, "agentops_runs", "status").items()):
        ax.plot(times, values, label=status)
    ax.set_title("Runs by status  (agentops_runs)")
    ax.legend(fontsize=8)

    ax = axes[0][1]
    for outcome, values in sorted(_series(samples, "agentops_effect_seconds_count",
                                          "outcome").items()):
        ax.plot(times, _rate(times, values), label=outcome)
    replayed = _series(samples, "agentops_effects_replayed_total", None)
    for values in replayed.values():
        ax.plot(times, _rate(times, values), label="replayed", linestyle="--")
    ax.set_title("Effects per second by outcome")
    ax.legend(fontsize=8)

    ax = axes[0][2]
    buckets = _series(samples, "agentops_effect_seconds_bucket", "le", tool=tool)
    for q in (0.5, 0.95):
        ax.plot(times, [v * 1000 for v in _quantile(times, buckets, q)], label=f"p{int(q * 100)}")
    ax.set_title(f"{tool.rsplit('.', 1)[-1]} latency, ms  (agentops_effect_seconds)")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    for name, label in (("agentops_due_runs", "due runs"),
                        ("agentops_oldest_due_run_age_seconds", "oldest due, s")):
        for values in _series(samples, name, None).values():
            ax.plot(times, values, label=label)
    ax.set_title("Due runs and the oldest one's age")
    ax.legend(fontsize=8)

    ax = axes[1][1]
    for name, label in (("agentops_lease_takeovers_total", "lease takeovers (total)"),
                        ("agentops_in_doubt_effects", "in-doubt effects"),
                        ("agentops_operator_actions_total", "operator actions (total)")):
        for values in _series(samples, name, None).values():
            ax.step(times, values, where="post", label=label)
    ax.set_title("Takeovers, in doubt, operator actions")
    ax.legend(fontsize=8)

    ax = axes[1][2]
    for role, values in sorted(_series(samples, "agentops_worker_processes", "role").items()):
        ax.step(times, values, where="post", label=role)
    ax.set_title("Worker processes alive")
    ax.legend(fontsize=8)

    for row in axes:
        for ax in row:
            ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("seconds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
