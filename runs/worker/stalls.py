"""When a run is stalled: the one rule, for every page, live feed and command.

`stalled` is a display state derived from a run's row, never a stored status: the
engine's statuses stay what they are. A queued or running run can stall, and a
waiting run whose timer (a sleep, a durable retry) is due, since it is then as good as
queued; a run that waits for input or on a timer not yet due, is paused, needs
attention or has ended never does. A run is stalled when (docs/stalls.md):

- its lease ran out more than one lease period ago and no worker took it over
  (the holder died, froze, or lost the database): "lease holder host:pid gone";
- it is running, its lease is renewed, but it has written nothing (no event, no
  checkpoint) for longer than its agent's `expected_cadence`: "no progress for";
- it is queued and no worker claimed it for STALL_UNCLAIMED_SECONDS: "queued 80 s"
  (a run handed back for a worker of its own code says so and where the new code
  diverges, docs/deploys.md);
- its timer is due and no worker claimed it for STALL_UNCLAIMED_SECONDS: "timer due
  80 s ago" (no cluster left to sweep it, or none with a free slot).

`stall_of` says it for one run (a model instance or a `.values()` row) and
`stalled_q` is the same rule as a filter, so the attention queue can ask the
database for exactly the stalled runs (through the partial index on active runs).
tests/web/test_stalls.py holds the two to the same cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from runs.deploys.words import version_wait
from runs.durable import records as r
from runs.durable import registry

STALLABLE = (r.QUEUED, r.RUNNING)
FIELDS = ("status", "agent", "lease_owner", "lease_expires_at", "updated_at", "wake_at",
          "attention")

LEASE_LOST = "lease_lost"   # a holder that stopped renewing, and nobody took over
SILENT = "silent"           # held and renewed, but no progress for too long
UNCLAIMED = "unclaimed"     # due, and no worker claimed it


@dataclass(frozen=True)
class Stall:
    kind: str
    since: datetime
    why: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "since": self.since.isoformat(), "why": self.why}


@dataclass(frozen=True)
class Limits:
    lease_grace: timedelta
    unclaimed: timedelta
    default_cadence: timedelta
    cadences: dict[str, timedelta]  # the agents that declare an expected_cadence

    def cadence(self, agent: str) -> timedelta:
        return self.cadences.get(agent, self.default_cadence)


def limits() -> Limits:
    conf = settings.AGENTOPS
    declared = {name: timedelta(seconds=cls.expected_cadence)
                for name, cls in registry.agents.items() if cls.expected_cadence}
    return Limits(lease_grace=timedelta(seconds=conf["LEASE_SECONDS"]),
                  unclaimed=timedelta(seconds=conf["STALL_UNCLAIMED_SECONDS"]),
                  default_cadence=timedelta(seconds=conf["EXPECTED_CADENCE_SECONDS"]),
                  cadences=declared)


def stall_of(run, now: datetime | None = None, within: Limits | None = None) -> Stall | None:
    """The stall of one run, or None. `run` is a Run or a dict with FIELDS."""
    row = run if isinstance(run, dict) else {name: getattr(run, name) for name in FIELDS}
    if row["status"] == r.WAITING:
        return _timer_unclaimed(row, now or timezone.now(), within or limits())
    if row["status"] not in STALLABLE:
        return None
    now, within = now or timezone.now(), within or limits()
    owner, expires, moved = row["lease_owner"], row["lease_expires_at"], row["updated_at"]
    if owner and expires is not None and expires < now - within.lease_grace:
        return Stall(LEASE_LOST, expires, f"lease holder {holder(owner)} gone: its lease ran "
                                          "out and no worker took the run over")
    if owner:
        cadence = within.cadence(row["agent"])
        if row["status"] == r.RUNNING and moved < now - cadence:
            return Stall(SILENT, moved, f"no progress for {span(now - moved)}, expected every "
                                        f"{span(cadence)} (held by {holder(owner)})")
        return None
    wait = within.unclaimed if row["status"] == r.QUEUED else within.lease_grace
    if moved < now - wait:
        return Stall(UNCLAIMED, moved, _unclaimed_why(row, f"{row['status']} {span(now - moved)}"))
    return None


def _unclaimed_why(row: dict, how_long: str) -> str:
    """Why nobody claims it: a run handed back for a worker of its own code says which
    code and where the new one diverges (docs/deploys.md); any other, that none did."""
    waits = version_wait(row["status"], row.get("attention"))
    if waits:
        return f"{waits.get('message', 'waiting for a worker of its code')} ({how_long})"
    return f"{how_long}, no worker claimed it"


def _timer_unclaimed(row: dict, now: datetime, within: Limits) -> Stall | None:
    """A due timer nobody claims; or one whose claimer died before its first write
    (the run is `waiting` from the claim until then)."""
    due, owner, expires = row["wake_at"], row["lease_owner"], row["lease_expires_at"]
    if due is None:
        return None
    if owner:
        if expires is not None and expires < now - within.lease_grace:
            return Stall(LEASE_LOST, expires, f"lease holder {holder(owner)} gone: its lease "
                                              "ran out and no worker took the run over")
        return None
    if due >= now - within.unclaimed:
        return None
    return Stall(UNCLAIMED, due, _unclaimed_why(row, f"timer due {span(now - due)} ago"))


KINDS = (LEASE_LOST, SILENT, UNCLAIMED)


def stalled_q(now: datetime | None = None, within: Limits | None = None,
              kind: str | None = None) -> Q:
    """stall_of as a filter: the runs for which it is not None (and of `kind`, if given)."""
    now, within = now or timezone.now(), within or limits()
    held = Q(lease_owner__isnull=False)
    lease_lost = held & Q(lease_expires_at__lt=now - within.lease_grace)
    lease_fresh = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__gte=now - within.lease_grace)
    active, timer = Q(status__in=STALLABLE), Q(status=r.WAITING, wake_at__isnull=False)
    by_kind = {
        LEASE_LOST: (active | timer) & lease_lost,
        SILENT: Q(status=r.RUNNING) & held & lease_fresh & _silent_q(now, within),
        UNCLAIMED: ~held & (Q(status=r.QUEUED, updated_at__lt=now - within.unclaimed)
                            | Q(status=r.RUNNING, updated_at__lt=now - within.lease_grace)
                            | (timer & Q(wake_at__lt=now - within.unclaimed))),
    }
    if kind is not None:
        return by_kind[kind]
    return by_kind[LEASE_LOST] | by_kind[SILENT] | by_kind[UNCLAIMED]


def _silent_q(now: datetime, within: Limits) -> Q:
    by_cadence: dict[timedelta, list[str]] = {}
    for name, cadence in within.cadences.items():
        by_cadence.setdefault(cadence, []).append(name)
    silent = Q(updated_at__lt=now - within.default_cadence)
    if within.cadences:
        silent &= ~Q(agent__in=list(within.cadences))
    for cadence, names in by_cadence.items():
        silent |= Q(agent__in=names, updated_at__lt=now - cadence)
    return silent


def mark_stalls(runs, now: datetime | None = None) -> list:
    """Set `.stall` on each run (no query); return the runs."""
    now, within = now or timezone.now(), limits()
    for run in runs:
        run.stall = stall_of(run, now, within)
    return runs


# --- words ---------------------------------------------------------------------------------
def holder(owner: str) -> str:
    """host:pid of a lease owner host:pid:token."""
    return ":".join(owner.split(":")[:2])


def span(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
