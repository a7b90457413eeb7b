"""Reads for the operator pages. The all-runs list pages with a keyset (seek) cursor
and never counts: a page costs the same few queries on 100,000 runs as on 100."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.paginator import Paginator
from django.db.models import Count, F, Max, Q, QuerySet, Sum, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from runs.deploys.selectors import waiting_for_version_q
from runs.durable import records as r
from runs.models import AuditEntry, Checkpoint, Effect, Run, RunEvent, WorkerHeartbeat
from runs.selectors import with_checkpoints
from runs.storage import retention
from runs.web.untrusted import is_run_id
from runs.worker import stalls

PAGE_SIZE = 50
SORT_FIELDS = {"-created": "created_at", "created": "created_at"}
HEX = re.compile(r"^[0-9a-f]{4,32}$")
RUN_ID_LENGTH = 32
TOTAL_BYTES_CACHE = ("agentops:ops:stored-bytes", 60)


# --- all runs ----------------------------------------------------------------------------
def filtered_runs(filters: dict, *, now: datetime | None = None) -> QuerySet:
    runs = Run.objects.select_related("owner").defer("inputs", "output", "error")
    if filters.get("status"):
        runs = runs.filter(status=filters["status"])
    if filters.get("attention"):
        runs = runs.filter(status=r.NEEDS_ATTENTION)
    if filters.get("agent"):
        runs = runs.filter(agent=filters["agent"])
    if filters.get("owner"):
        runs = runs.filter(owner__username=filters["owner"])
    if filters.get("worker"):
        runs = runs.filter(lease_owner__startswith=filters["worker"])
    if filters.get("stalled"):
        kind = filters["stalled"] if filters["stalled"] in stalls.KINDS else None
        runs = runs.filter(stalls.stalled_q(now, kind=kind))
    if filters.get("q"):
        runs = runs.filter(search_q(filters["q"].strip()))
    return runs


def search_q(text: str) -> Q:
    """A run ID (or its prefix) or an owner's username."""
    users = list(get_user_model().objects.filter(username__icontains=text)
                 .values_list("pk", flat=True)[:100])
    found = Q(owner_id__in=users) if users else Q(pk__in=[])
    return found | id_prefix_q(text)


def id_prefix_q(text: str) -> Q:
    """The runs whose ID starts with `text` (4 to 32 hex digits; none for other text)."""
    lowered = text.lower()
    if not HEX.match(lowered):
        return Q(pk__in=[])
    # A range on the primary key uses its index under any collation (runs_run has no
    # `_like` index: migration 0057); the startswith keeps it exact.
    low = lowered.ljust(RUN_ID_LENGTH, "0")
    high = lowered.ljust(RUN_ID_LENGTH, "f")
    return Q(pk__gte=low, pk__lte=high, pk__startswith=lowered)


@dataclass
class Page:
    runs: list
    sort: str
    next_cursor: str | None
    prev_cursor: str | None


def keyset_page(runs: QuerySet, sort: str = "-created", *, after: str | None = None,
                before: str | None = None, size: int = PAGE_SIZE) -> Page:
    if sort not in SORT_FIELDS:
        sort = "-created"
    field = SORT_FIELDS[sort]
    descending = sort.startswith("-")
    cursor = decode_cursor(before or after)
    backwards = bool(before) and cursor is not None
    forward_desc = descending != backwards
    if cursor is not None:
        value, run_id = cursor
        op, id_op = ("lt", "lt") if forward_desc else ("gt", "gt")
        edge = "lte" if forward_desc else "gte"
        runs = runs.filter(Q(**{f"{field}__{edge}": value})
                           & (Q(**{f"{field}__{op}": value}) | Q(**{f"pk__{id_op}": run_id})))
    prefix = "-" if forward_desc else ""
    rows = list(runs.order_by(f"{prefix}{field}", f"{prefix}pk")[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    if backwards:
        rows.reverse()
    has_next = more if not backwards else True
    has_prev = (cursor is not None) if not backwards else more
    return Page(rows, sort,
                next_cursor=encode_cursor(rows[-1], field) if rows and has_next else None,
                prev_cursor=encode_cursor(rows[0], field) if rows and has_prev else None)


def encode_cursor(run: Run, field: str) -> str:
    raw = f"{getattr(run, field).isoformat()}|{run.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None):
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value, run_id = raw.split("|", 1)
        when = datetime.fromisoformat(value)
        # a cursor this app gave has its time zone; a naive time is not one of them
        if not is_run_id(run_id) or when.tzinfo is None:
            return None
        return when, run_id
    except (ValueError, UnicodeDecodeError):
        return None  # a mangled cursor: the first page


def attention_count() -> int:
    """Runs that need attention, plus stalled runs and runs waiting for a worker of
    their code (docs/deploys.md), each once: two counts on the status indexes."""
    return (Run.objects.filter(status=r.NEEDS_ATTENTION).count()
            + Run.objects.filter(stalls.stalled_q() | waiting_for_version_q()).count())


def total_stored_bytes() -> int:
    key, ttl = TOTAL_BYTES_CACHE
    total = cache.get(key)
    if total is None:
        total = retention.stored_bytes()
        cache.set(key, total, ttl)
    return total


# --- attention queue -------------------------------------------------------------------------
ATTENTION_LIMIT = 200


def attention_queue(include_failed: bool = True, limit: int = ATTENTION_LIMIT) -> list[Run]:
    """Stalled runs, longest stalled first; then runs waiting for a worker of their code
    (queued, not yet stalled: docs/deploys.md), longest waiting first; then those that
    need attention (and failed ones), newest first: three queries, each bounded."""
    runs = Run.objects.select_related("owner").defer("inputs", "output")
    found = list(runs.filter(stalls.stalled_q()).order_by("updated_at", "pk")[:limit])
    if len(found) < limit:
        found += runs.filter(waiting_for_version_q()).exclude(stalls.stalled_q()) \
            .order_by("updated_at", "pk")[:limit - len(found)]
    statuses = [r.NEEDS_ATTENTION] + ([r.FAILED] if include_failed else [])
    if len(found) < limit:
        found += runs.filter(status__in=statuses).order_by("-updated_at", "-pk")[
            :limit - len(found)]
    return found


def in_doubt_effects(runs: list[Run]) -> dict[str, Effect]:
    """The intent row of each in-doubt run, in one query."""
    wanted = [Q(run_id=run.pk, branch=run.branch, step_no=run.attention.get("step_no"),
                seq=run.attention.get("seq"))
              for run in runs if (run.attention or {}).get("kind") == "in_doubt"]
    if not wanted:
        return {}
    either = wanted[0]
    for condition in wanted[1:]:
        either |= condition
    return {e.run_id: e for e in Effect.objects.filter(either)}


# --- one run -----------------------------------------------------------------------------------
RECENT = 100


def run_detail(run: Run) -> dict:
    checkpoints = list(Checkpoint.objects.filter(run=run).defer("blob").order_by("-number")[:RECENT])
    # newest first as on the owner's page (runs/selectors.py, run_effects): by "-id" alone
    # the planner walked every run's effects backwards by the primary key to meet a
    # large run's (203 ms for a run of 10,000 effects among 2,000,000: bench/scale.py)
    effects = list(Effect.objects.filter(run=run).order_by("-started_at", "-id")[:RECENT])
    recent = RunEvent.objects.filter(run=run).order_by("-seq")[:RECENT]
    events = with_checkpoints(list(recent)[::-1])
    audit = list(AuditEntry.objects.filter(run=run).order_by("-created_at", "-id")[:RECENT])
    in_doubt = in_doubt_effects([run]).get(run.pk) if run.status == r.NEEDS_ATTENTION else None
    return {"checkpoints": checkpoints, "effects": effects, "events": events, "audit": audit,
            "in_doubt": in_doubt, "stored_bytes": retention.stored_bytes([run.pk]).get(run.pk, 0),
            "checkpoints_shown": len(checkpoints) == RECENT}


def events_after(run: Run, seq: int, limit: int = 500) -> list[RunEvent]:
    return with_checkpoints(list(RunEvent.objects.filter(run=run, seq__gt=seq)
                                 .order_by("seq")[:limit]))


def latest_state(run: Run):
    """The state an edit starts from: the latest checkpoint on the live branch."""

    checkpoint = (Checkpoint.objects.filter(run=run, branch=run.branch)
                  .order_by("-step_no", "-number").first())
    if checkpoint is None:
        return None, None
    return checkpoint, checkpoint.state()


# --- workers ---------------------------------------------------------------------------------
RATE_WINDOW = timedelta(minutes=5)
HEARTBEAT_STALE = timedelta(seconds=15)


WORKER_RUNS_SHOWN = 20  # a process's held runs on the page; the rest are a link away


@dataclass
class WorkerProcess:
    host: str
    pid: int
    owner: str
    runs: list
    last_renewal: datetime | None
    held: int = 0

    @property
    def more(self) -> int:
        """Held runs not shown: the operators' list filtered by this worker lists them."""
        return self.held - len(self.runs)


def _processes_holding_runs(lease: timedelta) -> dict[str, WorkerProcess]:
    """The worker processes that hold runs, by lease owner, each with its first
    WORKER_RUNS_SHOWN runs, how many it holds and its last renewal (its latest lease
    expiry less the lease's length), in one query: rendering every held run made the page
    grow with them (2,000 running runs: 350-570 ms in bench/scale.py)."""
    process_of = {"partition_by": [F("lease_owner")]}
    held = (Run.objects.filter(lease_owner__isnull=False)
            .only("id", "agent", "status", "lease_owner", "lease_expires_at", "step_no", "event_seq",
                  "control")  # shown beside the status: deferred, a query per run
            .annotate(position=Window(RowNumber(), order_by=[F("id").asc()], **process_of),
                      held=Window(Count("pk"), **process_of),
                      expires=Window(Max("lease_expires_at"), **process_of))
            .filter(position__lte=WORKER_RUNS_SHOWN).order_by("lease_owner", "id"))
    processes: dict[str, WorkerProcess] = {}
    for run in held:
        host, pid = _split_owner(run.lease_owner)
        renewed = run.expires - lease if run.expires else None
        processes.setdefault(run.lease_owner, WorkerProcess(host, pid, run.lease_owner, [],
                                                            renewed, run.held)).runs.append(run)
    return processes


def workers_overview(now: datetime | None = None) -> dict:
    from django.conf import settings

    from runs.storage.orm import due_runs_queryset

    now = now or timezone.now()
    processes = _processes_holding_runs(timedelta(seconds=settings.AGENTOPS["LEASE_SECONDS"]))
    clusters = list(WorkerHeartbeat.objects.all())
    hosts: dict[str, dict] = {}
    for cluster in clusters:
        cluster.stale = now - cluster.last_seen > HEARTBEAT_STALE
        cluster.problem = cluster_problem(cluster, now)
        hosts.setdefault(cluster.host, {"clusters": [], "processes": []})["clusters"].append(cluster)
    for process in processes.values():
        hosts.setdefault(process.host, {"clusters": [], "processes": []})["processes"].append(process)
    finished = (Run.objects.filter(finished_at__gte=now - RATE_WINDOW).values("status")
                .annotate(n=Count("id")).order_by())
    finished_by_status = {row["status"]: row["n"] for row in finished}
    minutes = RATE_WINDOW.total_seconds() / 60
    return {
        "hosts": dict(sorted(hosts.items())),
        # due and unclaimed: waiting for a free slot (a healthy fleet keeps it near 0)
        "due_runs": due_runs_queryset(now.timestamp()).count(),
        "queued_runs": Run.objects.filter(status=r.QUEUED).count(),
        "finished": finished_by_status,
        "finished_per_minute": round(sum(finished_by_status.values()) / minutes, 2),
        "window_minutes": int(minutes),
        "now": now,
    }


def cluster_problem(cluster: WorkerHeartbeat, now: datetime) -> str:
    """Why a cluster has stopped working, from its heartbeat row; "" if it works. A
    stale row says nothing of its processes any more: its main may be dead or frozen."""
    if cluster.stale:
        return f"no heartbeat for {int((now - cluster.last_seen).total_seconds())} s"
    live = [p for p in cluster.processes if p.get("role") == "worker" and p.get("alive")
            and p.get("status") != "stopped"]
    return "" if live else "no live worker"


def _split_owner(owner: str) -> tuple[str, int]:
    parts = owner.split(":")
    try:
        return parts[0], int(parts[1])
    except (IndexError, ValueError):
        return owner, 0


# --- the rollback preview ----------------------------------------------------------------
PREVIEW_FEW = 5  # calls shown at each end of what a rollback supersedes
PREVIEW_PAGE = 25


def rollback_pages(preview: dict | None, query) -> dict:
    """The first and last few superseded calls, and one page of all of them: the page
    stays short (and its Confirm button on screen) whatever the rollback undoes."""
    if preview is None:
        return {}
    effects = preview["effects"]
    few = PREVIEW_FEW
    ends = (effects, []) if len(effects) <= 2 * few else (effects[:few], effects[-few:])
    return {"first_effects": ends[0], "last_effects": ends[1],
            "effects_page": Paginator(effects, PREVIEW_PAGE).get_page(query.get("page")),
            "listing_open": "page" in query}


def activity_fingerprint(now: datetime | None = None) -> tuple:
    """What the operator pages that depend on every run show, in a few indexed reads
    (run_sweep_active, run_created) and the heartbeat rows: it changes when an active run
    commits, a run starts or stops being active, a run is launched, or a cluster gains or
    loses a process or a problem (not at every heartbeat)."""
    now = now or timezone.now()
    active = Run.objects.filter(status__in=[r.QUEUED, r.RUNNING]).aggregate(
        n=Count("pk"), seq=Sum("event_seq"))
    newest = Run.objects.order_by("-created_at").values_list("pk", flat=True).first()
    clusters = []
    for cluster in WorkerHeartbeat.objects.all():
        cluster.stale = now - cluster.last_seen > HEARTBEAT_STALE
        pids = sorted(str(p.get("pid")) for p in cluster.processes if isinstance(p, dict))
        clusters.append((cluster.pk, cluster_problem(cluster, now), tuple(pids)))
    return active["n"], active["seq"], newest, tuple(clusters)
