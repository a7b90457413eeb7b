"""The reliability report, as Markdown (docs/RELIABILITY.md describes it)."""

from __future__ import annotations

import os
from collections import Counter

TARGETS = [
    # (label, kinds, p95 limit in seconds)
    ("recovery after SIGKILL", ("worker_sigkill", "tree_sigkill"), 10.0),
    ("recovery after SIGTERM (deploy)", ("tree_sigterm",), 2.0),
]


def _s(value) -> str:
    return "-" if value is None else f"{value:.2f} s"


def render(result) -> str:
    p = result.profile
    plans = result.plans
    figures = result.figures
    lines = [
        f"# agentops chaos report: {p.name} profile",
        "",
        f"- seed: **{p.seed}** (replay: `python -m tests.chaos {'--ci ' if p.name == 'ci' else ''}"
        f"--seed {p.seed}{' --sqlite' if result.database == 'SQLite' else ''}`)",
        f"- database: {result.database}; clusters: {p.clusters} x {p.workers} workers; "
        f"lease {p.lease_seconds} s; time slice {p.time_slice} s",
        f"- wall time: {result.timings.get('total')} s (set up {result.timings.get('set up')} s, "
        f"storm {result.timings.get('storm')} s, drain {result.timings.get('drain')} s, "
        f"audit {result.timings.get('audit')} s)",
        f"- verdict: **{'PASS' if not result.findings else 'FAIL'}**, "
        f"{len(result.findings)} finding(s)",
        "",
        "## Runs",
        "",
        f"{len(plans)} launched; outcomes: " + ", ".join(
            f"{k} {v}" for k, v in sorted(figures.get("outcomes", {}).items())),
        "",
        "| configuration | runs | followed | rolled back | cancelled (accepted) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    by_config = Counter(plan.config for plan in plans.values())
    for name, n in sorted(by_config.items()):
        mine = [pl for pl in plans.values() if pl.config == name]
        lines.append(f"| {name} | {n} | {sum(pl.followed for pl in mine)} | "
                     f"{sum(1 for pl in mine if pl.rollbacks)} | "
                     f"{sum(1 for pl in mine if pl.cancel_at)} |")
    lines += ["", "## Faults", "",
              f"{len(result.faults)} struck (target {p.faults}); {len(result.unfired)} fault "
              "point(s) armed but never reached were disarmed.", "",
              "| kind | struck | runs hit |", "| --- | ---: | ---: |"]
    kinds = Counter(f.kind for f in result.faults)
    hit = Counter()
    for f in result.faults:
        hit[f.kind] += len(f.runs)
    for kind in p.kinds:
        lines.append(f"| {kind} | {kinds.get(kind, 0)} | {hit.get(kind, 0)} |")
    lines += ["", "## Recoveries", "",
              "From the fault to the next new effect of each run it hit (runs an operator "
              "touched in between are left out).", "",
              "| kind | recoveries | p50 | p95 | max |", "| --- | ---: | ---: | ---: | ---: |"]
    for kind, s in figures.get("recovery", {}).items():
        lines.append(f"| {kind} | {s['n']} | {_s(s['p50'])} | {_s(s['p95'])} | {_s(s['max'])} |")
    slowest = sorted((r for r in result.recoveries if r["latency"] is not None),
                     key=lambda r: -r["latency"])[:3]
    if slowest:
        lines += ["", "Slowest: " + "; ".join(
            f"{r['kind']} -> {r['run']} ({r['agent']}) {_s(r['latency'])} by its {r['how']}"
            + (f", after: {', '.join(r['between'])}" if r["between"] else "")
            for r in slowest)]
    skipped = Counter(r["how"] for r in result.recoveries if r["latency"] is None)
    if skipped:
        lines += ["", "Not measured: " + ", ".join(f"{how} {n}" for how, n in skipped.items())]
    lines += ["", "## Operators and users", "",
              "| action | accepted | refused (lost a race) |", "| --- | ---: | ---: |"]
    for action, counts in sorted(result.actions.items()):
        lines.append(f"| {action} | {counts.get('ok', 0)} | {counts.get('refused', 0)} |")
    in_doubt = [d for d in result.decisions if d.kind == "in_doubt"]
    resolutions = Counter(d.resolution for d in in_doubt)
    lines += ["", f"In-doubt effects surfaced and resolved: {len(in_doubt)} ("
              + ", ".join(f"{k} {v}" for k, v in sorted(resolutions.items())) + "); "
              f"crash-loop stops resumed: "
              f"{sum(1 for d in result.decisions if d.kind == 'crash_loop')}."]
    outside = figures.get("outside", {})
    followers = figures.get("followers", {})
    lines += ["", "## Outside world and viewers", "",
              f"- records written: {outside.get('records')}, of which re-done after an "
              f"operator's rollback: {outside.get('redone_after_rollback')}, cut off by a "
              f"crash before their log and then rolled back: "
              f"{outside.get('unlogged_then_rolled_back')}",
              f"- calls to the idempotent target: {outside.get('calls')}, answered from the "
              f"stored response (deduplicated): {outside.get('replays')}, 409 in progress: "
              f"{outside.get('conflicts')}",
              f"- notifications (not idempotent): {outside.get('notifications')}",
              f"- websocket followers: {followers.get('count')}, events received "
              f"{followers.get('events')}, reconnections {followers.get('reconnects')}"]
    load = figures.get("load")
    if load and load["samples"]:
        samples = sorted(load["samples"])
        lines.append(f"- machine load (1-min load average, {os.cpu_count()} cores): median "
                     f"{samples[len(samples) // 2]:.1f}, max {load['max']:.1f}")
    connections = figures.get("connections")
    if connections:
        lines.append(f"- peak PostgreSQL connections to the chaos database: "
                     f"{connections['peak']} ({connections['by_process']})")
    lines += ["", "## Targets", ""]
    lines += _targets(result)
    lines += ["", "## Findings", ""]
    lines += [f"- {f}" for f in result.findings] or ["None: no run lost or stuck, no output "
                                                     "changed, no duplicate effect downstream, "
                                                     "no silently repeated call, no event gap."]
    if result.notes:
        lines += ["", "## Harness notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def _targets(result) -> list[str]:
    findings = result.findings
    lines = [
        f"- runs: {len(result.plans)} (full-run target >= 200: "
        f"{'met' if len(result.plans) >= 200 else 'not met'})",
        f"- faults: {len(result.faults)} (full-run target >= 100: "
        f"{'met' if len(result.faults) >= 100 else 'not met'}), kinds missing: "
        f"{', '.join(k for k in result.profile.kinds if not any(f.kind == k for f in result.faults)) or 'none'}",
        f"- lost or stuck runs: {sum(1 for f in findings if f.startswith(('lost run', 'stuck run')))}",
        f"- duplicate effects downstream: {sum(1 for f in findings if 'duplicate effect' in f or 'phantom' in f)}",
        f"- silently repeated non-idempotent calls: {sum(1 for f in findings if 'repeated without' in f)}",
        f"- event gaps for viewers: {sum(1 for f in findings if f.startswith('follower'))}",
    ]
    from tests.chaos.recovery import percentile
    for label, kinds, limit in TARGETS:
        values = [r["latency"] for r in result.recoveries
                  if r["kind"] in kinds and r["latency"] is not None]
        p95 = percentile(values, 95)
        verdict = "no sample" if p95 is None else ("met" if p95 < limit else "MISSED")
        lines.append(f"- {label}: p95 {_s(p95)} (target < {limit:.0f} s, {len(values)} "
                     f"samples): {verdict}")
    return lines
