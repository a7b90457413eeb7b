"""Reads for the user's pages and live feeds. Permission checks live here, once:
a run a user may not see does not exist for them (404, never 403)."""

from __future__ import annotations

from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from runs.durable import records as r
from runs.models import Checkpoint, Effect, Run, RunEvent
from runs.worker import stalls

ACTIVE_STATUSES = (r.QUEUED, r.RUNNING, r.PAUSED, r.WAITING, r.NEEDS_ATTENTION)
STATUS_FILTERS = {"active": ACTIVE_STATUSES, **{s: (s,) for s in r.STATUSES}}
EVENT_BATCH = 500
TAIL_EVENTS = 500
EFFECTS_SHOWN = 200


def can_see_all(user) -> bool:
    return bool(user and user.is_authenticated and user.has_perm("runs.operate_run"))


def visible_runs(user):
    """The runs a user may open: their own, or every run for an operator."""
    if can_see_all(user):
        return Run.objects.all()
    if not (user and user.is_authenticated):
        return Run.objects.none()
    return Run.objects.filter(owner=user)


def run_get_for_user(user, run_id: str) -> Run:
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run


def owns(user, run: Run) -> bool:
    """The owner's own actions on a run (cancel it from its page, answer its question);
    an operator does the rest from the operator side, with a reason."""
    return bool(user and user.is_authenticated and run.owner_id == user.pk)


def run_visible(user, run_id: str) -> bool:
    return visible_runs(user).filter(pk=run_id).exists()


def run_list(user, *, status: str = "", agent: str = ""):
    """The user's own runs ("My runs"), newest first, filtered."""
    runs = Run.objects.filter(owner=user).order_by("-created_at", "-pk")
    if status in STATUS_FILTERS:
        runs = runs.filter(status__in=STATUS_FILTERS[status])
    if agent:
        runs = runs.filter(agent=agent)
    return runs


CHIP_COUNT_CAP = 1_000


def run_status_counts(user, filters, cap: int) -> dict[str, int]:
    """How many of the user's runs each status filter ("" for all of them) finds, each
    counted up to cap + 1 (more than `cap` reads as cap + 1): a full count reads every
    run of the user (100,000 runs: 233-550 ms in bench/scale.py), a capped one stops
    there. Each capped row is still a heap read (10,000 of them: 60 ms), hence 1,000.
    Unordered: the model's newest-first order made the planner walk every user's
    succeeded runs by time to find this user's (480 ms)."""
    counts = {}
    for status in filters:
        runs = Run.objects.filter(owner=user).order_by()
        if status:
            runs = runs.filter(status__in=STATUS_FILTERS[status])
        counts[status] = runs.values("pk")[: cap + 1].count()
    return counts


def newest_run_id(user) -> str | None:
    return (Run.objects.filter(owner=user).order_by("-created_at", "-pk")
            .values_list("pk", flat=True).first())


SUMMARY_FIELDS = ("id", "event_seq", "step_no", "branch", "progress_done",
                  "progress_total", "progress_message", "attention", *stalls.FIELDS)


def run_summaries(user, run_ids) -> list[dict]:
    """What a row of the run list shows, for live updates."""
    rows = Run.objects.filter(owner=user, pk__in=list(run_ids)).values(*SUMMARY_FIELDS)
    now, within = timezone.now(), stalls.limits()
    return [summary_message(row, stalls.stall_of(row, now, within)) for row in rows]


def summary_message(row: dict, stall: stalls.Stall | None = None) -> dict:
    total, done = row["progress_total"], row["progress_done"]
    if total:
        percent = max(0.0, min(100.0, 100.0 * done / total))
    else:
        percent = 100.0 if row["status"] == r.SUCCEEDED else 0.0
    return {"id": row["id"], "status": row["status"], "seq": row["event_seq"],
            "step": row["step_no"], "branch": row["branch"], "done": done, "total": total,
            "percent": round(percent, 1), "message": row["progress_message"],
            "final": row["status"] in r.FINAL_STATUSES,
            "asks": row["status"] == r.WAITING and (row["attention"] or {}).get("kind") == "input",
            "stall": stall.as_dict() if stall else None}


# --- events -------------------------------------------------------------------------------
def events_after(run_id: str, after: int, limit: int = EVENT_BATCH,
                 upto: int | None = None) -> list[RunEvent]:
    events = RunEvent.objects.filter(run_id=run_id, seq__gt=after)
    if upto is not None:
        events = events.filter(seq__lte=upto)
    return with_checkpoints(list(events.order_by("seq")[:limit]))


def events_in_ranges(ranges) -> list[RunEvent]:
    """Events of several runs in one query; `ranges` is [(run_id, after, upto), ...]."""
    where = Q()
    for run_id, after, upto in ranges:
        where |= Q(run_id=run_id, seq__gt=after, seq__lte=upto)
    return with_checkpoints(list(RunEvent.objects.filter(where).order_by("run_id", "seq")))


def events_tail(run: Run, limit: int = TAIL_EVENTS) -> list[RunEvent]:
    """The last `limit` events up to the run row's event_seq: the page shows exactly
    the state at that seq, and the live feed continues after it."""
    events = (RunEvent.objects.filter(run=run, seq__lte=run.event_seq)
              .order_by("-seq")[:limit])
    return with_checkpoints(list(reversed(events)))


def events_before(run: Run, before: int, limit: int = TAIL_EVENTS) -> list[RunEvent]:
    events = RunEvent.objects.filter(run=run, seq__lt=before).order_by("-seq")[:limit]
    return with_checkpoints(list(reversed(events)))


def with_checkpoints(events: list[RunEvent]) -> list[RunEvent]:
    """`events`, each checkpoint event's data completed from its checkpoint's row (one
    query): the event holds the number only, the row the branch, step, size and reason
    (runs/durable/events.py). An event written before holds them itself; one whose
    checkpoint retention removed keeps its number only."""
    wanted: dict[str, list[int]] = {}
    for e in events:
        if e.kind == "checkpoint" and "step" not in e.data:
            wanted.setdefault(e.run_id, []).append(e.data.get("number"))
    if not wanted:
        return events
    where = Q()
    for run_id, numbers in wanted.items():
        where |= Q(run_id=run_id, number__in=numbers)
    found = {(run_id, number): {"branch": branch, "step": step, "size": size, "reason": reason}
             for run_id, number, branch, step, size, reason in Checkpoint.objects.filter(where)
             .values_list("run_id", "number", "branch", "step_no", "size", "reason")}
    for e in events:
        if e.kind == "checkpoint":
            e.data = {**e.data, **found.get((e.run_id, e.data.get("number")), {})}
    return events


# Events that start a new branch from a checkpoint (runs/durable/control/forks.py, fork)
FORK_EVENTS = ("rollback", "edit", "upgrade")


def progress_samples(run: Run, limit: int = 60) -> list[dict]:
    """Recent progress events of the run's branch, for the rate and ETA. Those before the
    branch began (its rollback, edit or upgrade) measured work the run went back on: a
    rate from both would mix the old branch's pace with the new one's."""
    rows = (RunEvent.objects.filter(run=run, kind__in=("progress", *FORK_EVENTS),
                                    seq__lte=run.event_seq).order_by("-seq")[:limit])
    samples = []
    for e in rows:
        if e.kind != "progress":
            break
        samples.append({"at": e.created_at.timestamp(), "done": e.data.get("done", 0),
                        "total": e.data.get("total", 0)})
    return samples[::-1]


def run_heads(run_ids) -> dict[str, tuple[int, dict | None]]:
    """Each run's last event seq and its stall (as a dict, or None), in one query."""
    rows = Run.objects.filter(pk__in=list(run_ids)).values("pk", "event_seq", *stalls.FIELDS)
    now, within = timezone.now(), stalls.limits()
    heads = {}
    for row in rows:
        stall = stalls.stall_of(row, now, within)
        heads[row["pk"]] = (row["event_seq"], stall.as_dict() if stall else None)
    return heads


# --- effects and checkpoints ------------------------------------------------------------------
def run_effects(run: Run, limit: int = EFFECTS_SHOWN) -> tuple[list[Effect], int]:
    """The latest effects (calls, sleeps, inputs), newest first, and how many there are."""
    effects = Effect.objects.filter(run=run).exclude(kind__in=[r.NOW, r.RANDOM])
    total = effects.count()
    return list(effects.order_by("-started_at", "-id")[:limit]), total


def run_current_step(run: Run) -> int:
    """The step the run is in, or last finished: past its last checkpoint's step when its
    branch logged effects of later steps (an agent may checkpoint only every N steps).
    The run page's live script applies the same rule to effect events (static/js/run.js)."""
    later = (Effect.objects.filter(run=run, branch=run.branch, step_no__gt=run.step_no)
             .order_by("-step_no").values_list("step_no", flat=True).first())
    return later if later is not None else run.step_no


TIMELINE_CHECKPOINTS = 2000


def run_checkpoints(run: Run, limit: int = TIMELINE_CHECKPOINTS) -> list[Checkpoint]:
    """The latest `limit` checkpoints (without their blobs), oldest first."""
    rows = Checkpoint.objects.filter(run=run).defer("blob").order_by("-number")[:limit]
    return list(reversed(rows))


def checkpoint_get(run: Run, number: int) -> Checkpoint:
    checkpoint = Checkpoint.objects.filter(run=run, number=number).first()
    if checkpoint is None:
        raise Http404("No such checkpoint.")
    return checkpoint


def checkpoint_state(checkpoint: Checkpoint):
    return checkpoint.state()


TIMELINE_TROUBLES = 200


def run_trouble_events(run: Run, limit: int = TIMELINE_TROUBLES) -> list[RunEvent]:
    """The latest `limit` failures and stops that needed attention, for the timeline,
    oldest first. The limit bounds the read, and keeps the plan on the run's own status
    events (event_run_status) whatever share of the table the run holds: without it, for
    a run of 1,000,000 of 4,500,000 events, the planner took a fifth of every run's
    status events for this run's and scanned them all by the webhooks' index (1.1 s)."""
    rows = (RunEvent.objects.filter(run=run, kind="status")
            .filter(Q(data__status=r.FAILED) | Q(data__status=r.NEEDS_ATTENTION))
            .order_by("-seq")[:limit])
    return list(reversed(rows))


# --- chat agents (runs/chat/) --------------------------------------------------------------
def run_latest_checkpoint(run: Run) -> Checkpoint | None:
    """The checkpoint the run would resume from: the newest of its live branch."""
    return (Checkpoint.objects.filter(run=run, branch=run.branch)
            .order_by("-step_no", "-number").first())


def run_stream_events(run: Run, *, upto: int) -> list[RunEvent]:
    """The `stream` events since the run's last checkpoint event, up to seq `upto` (the
    seq the page is rendered at: the live feed goes on from there)."""
    last = (RunEvent.objects.filter(run=run, kind="checkpoint", seq__lte=upto)
            .order_by("-seq").values_list("seq", flat=True).first()) or 0
    return list(RunEvent.objects.filter(run=run, kind="stream", seq__gt=last, seq__lte=upto)
                .order_by("seq"))


CHILDREN_SHOWN = 200


def run_children(run: Run, limit: int = CHILDREN_SHOWN) -> tuple[list[Run], int]:
    """The run's child runs (docs/children.md), oldest first, and how many there are."""
    children = Run.objects.filter(parent_id=run.pk).order_by("created_at", "id")
    return list(children[:limit]), children.count()

