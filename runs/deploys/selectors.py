"""Reads for deploys: which runs a replay check looks at, the runs waiting for a worker
of their code (grouped by agent and code), and the codes the live clusters serve."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from runs.deploys.words import WAITS_IN
from runs.durable import records as r
from runs.durable.upgrade import VERSION_WAIT
from runs.models import Run, WorkerHeartbeat
from runs.worker import fleet

REPLAY_CHECK_LIMIT = 200
WAITS_SHOWN = 2000  # runs read for the Deploys page: every group's count is exact up to it


def replay_candidates(*, agent: str = "", statuses=(), limit: int = REPLAY_CHECK_LIMIT
                      ) -> list[Run]:
    """The runs a replay check replays: those not ended first (newest first), then the
    newest ended ones, `limit` in all. Two bounded reads on the status indexes."""
    runs = Run.objects.only("id", "agent", "status", "agent_version", "code_fingerprint")
    if agent:
        runs = runs.filter(agent=agent)
    if statuses:
        runs = runs.filter(status__in=list(statuses))
    order = ("-created_at", "-pk")
    live = list(runs.exclude(status__in=r.FINAL_STATUSES).order_by(*order)[:limit])
    if len(live) >= limit:
        return live
    ended = runs.filter(status__in=r.FINAL_STATUSES).order_by(*order)[:limit - len(live)]
    return live + list(ended)


def waiting_for_version_q() -> Q:
    """Runs handed back for a worker of their own code (runs/durable/upgrade.py)."""
    return Q(status__in=WAITS_IN, attention__kind=VERSION_WAIT)


def version_waits(limit: int = WAITS_SHOWN) -> list[Run]:
    """The runs waiting for a worker of their code, oldest wait first."""
    return list(Run.objects.filter(waiting_for_version_q()).select_related("owner")
                .defer("inputs", "output").order_by("updated_at", "pk")[:limit])


@dataclass
class WaitGroup:
    """The runs of one agent's code that wait for it, and where the first of them diverges."""

    agent: str
    version: str
    code: str
    runs: list = field(default_factory=list)
    served: list[str] = field(default_factory=list)  # live clusters that have this code

    @property
    def key(self) -> str:
        return group_key(self.agent, self.code)

    @property
    def divergences(self) -> list[tuple[str, int]]:
        """Each distinct reason the runs wait, with how many runs give it."""
        counts: dict[str, int] = {}
        for run in self.runs:
            message = (run.attention or {}).get("message", "")
            counts[message] = counts.get(message, 0) + 1
        return sorted(counts.items(), key=lambda item: -item[1])


def group_key(agent: str, code: str) -> str:
    return f"{code or '-'}/{agent}"


def wait_groups(runs: list[Run], clusters: dict[str, list[str]]) -> list[WaitGroup]:
    """`runs` grouped by agent and code, with the live clusters that serve each code."""
    groups: dict[str, WaitGroup] = {}
    for run in runs:
        key = group_key(run.agent, run.code_fingerprint)
        if key not in groups:
            groups[key] = WaitGroup(run.agent, run.agent_version, run.code_fingerprint,
                                    served=clusters.get(run.code_fingerprint, []))
        groups[key].runs.append(run)
    return sorted(groups.values(), key=lambda g: (g.agent, g.version, g.code))


@dataclass(frozen=True)
class LiveCode:
    fingerprint: str
    agent: str
    version: str
    upgrade: str
    clusters: tuple[str, ...]


def live_codes() -> list[LiveCode]:
    """The codes live clusters serve (fleet.live_codes: alive, not stopping), with the
    clusters that advertise each, by agent and version."""
    live = fleet.live_codes()
    by_code = clusters_by_code(live)
    return sorted((LiveCode(fp, code.get("agent", "?"), str(code.get("version", "?")),
                            code.get("upgrade", ""), tuple(by_code.get(fp, ())))
                   for fp, code in live.items()),
                  key=lambda c: (c.agent, c.version, c.fingerprint))


def clusters_by_code(live: dict[str, dict]) -> dict[str, list[str]]:
    """fingerprint -> the names of the clusters that advertise it, for the live codes."""
    since = timezone.now() - timedelta(seconds=fleet.LIVE_AFTER_SECONDS)
    found: dict[str, list[str]] = {}
    for beat in WorkerHeartbeat.objects.filter(last_seen__gte=since, stopping=False):
        for fp in beat.codes or {}:
            if fp in live:
                found.setdefault(fp, []).append(f"{beat.cluster or 'cluster'} "
                                                f"{beat.host}:{beat.pid}")
    return found
