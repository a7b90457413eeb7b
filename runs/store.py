"""The ORM implementation of the engine's Store protocol (runs/durable/store.py).

Every engine write is one transaction whose first statement is a conditional
UPDATE of the run row `WHERE epoch = <the writer's epoch>`: a writer whose
epoch was fenced off changes nothing, and the row lock it takes orders it
against a concurrent claim.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone

from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.db.models import F, Q

from runs import store_pg
from runs.durable import records as r
from runs.durable import serde
from runs.durable.errors import FencedError, RunNotFoundError
from runs.durable.faults import faults
from runs.models import AuditEntry, Checkpoint, Effect, Run, RunEvent

RUN_TIME_FIELDS = {"lease_expires_at", "wake_at", "suspended_at", "created_at", "updated_at"}
# the Run columns a RunRecord carries (its `owner` is the owner_id)
RECORD_COLUMNS = ("id", "agent", "agent_version", "inputs", "status", "branch", "step_no",
                  "epoch", "lease_owner", "lease_expires_at", "control", "output", "error",
                  "attention", "progress_done", "progress_total", "progress_message",
                  "wake_at", "crash_count", "crash_step", "event_seq", "created_at",
                  "updated_at", "suspended_at")
LOAD_PAGE = 500  # effects read a query at a time on resume (see live_effects)
COMMIT_READ = ("epoch", "event_seq", "control", "checkpoint_count", "agent", "branch")
EFFECT_UPDATE_FIELDS = ["status", "result", "error", "attempts", "finished_at", "resolution",
                        "superseded", "worker", "started_at", "epoch"]


def to_dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=dt_timezone.utc)


def to_ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class OrmStore:
    def __init__(self, notify=None):
        # notify(run_id, last_seq) runs after commit: it only wakes viewers up.
        self.notify = notify

    # --- the protocol -----------------------------------------------------------------
    def create_run(self, run: r.RunRecord) -> r.RunRecord:
        now = datetime.now(dt_timezone.utc)
        row = Run(id=run.id, owner_id=int(run.owner) if str(run.owner).isdigit() else None,
                  agent=run.agent, agent_version=run.agent_version, inputs=run.inputs,
                  status=run.status, created_at=now, updated_at=now, event_seq=1)
        event = {"status": run.status, "event": "launched"}
        if connection.vendor == "postgresql":
            store_pg.create_run_in_one_statement(row, event)
        else:
            with transaction.atomic():
                row.save(force_insert=True)
                RunEvent.objects.create(run=row, seq=1, kind="status", data=event)
        self._notify_on_commit(row.id, 1)
        return run_record(row)

    def get(self, run_id: str) -> r.RunRecord:
        return run_record(self._get(run_id))

    def load(self, run_id: str) -> r.Loaded:
        row = self._get(run_id)
        checkpoint = (Checkpoint.objects.filter(run_id=run_id, branch=row.branch)
                      .order_by("-step_no", "-number").first())
        after = checkpoint.step_no if checkpoint else 0
        bases = []
        if checkpoint is not None and checkpoint.codec == serde.PATCH_CODEC:
            bases = patch_bases(run_id, checkpoint_record(checkpoint))
        return r.Loaded(run_record(row), checkpoint_record(checkpoint) if checkpoint else None,
                        live_effects(run_id, row.branch, after), bases)

    def claim(self, run_id: str, owner: str, lease_seconds: float, now: float) -> r.Claim | None:
        now_dt = to_dt(now)
        if connection.vendor == "postgresql":
            return self._claim_and_load(run_id, owner, to_dt(now + lease_seconds), now_dt)
        # One conditional UPDATE that returns the row it claimed (it was an UPDATE and
        # a SELECT). SET expressions read the old row: an unreleased lease means its
        # owner died.
        rows = list(Run.objects.raw(
            "UPDATE runs_run SET epoch = epoch + 1, lease_owner = %s, lease_expires_at = %s, "
            "claimed_after_crash = (lease_owner IS NOT NULL), enqueued_at = NULL, "
            "updated_at = %s WHERE id = %s "
            "AND (status IN (%s, %s) OR (status = %s AND wake_at <= %s)) "
            "AND (lease_owner IS NULL OR lease_expires_at <= %s) RETURNING *",
            [owner, to_dt(now + lease_seconds), now_dt, run_id, r.QUEUED, r.RUNNING, r.WAITING,
             now_dt, now_dt]))
        if not rows:
            return None  # not runnable, or another worker got there first
        return r.Claim(run_record(rows[0]), rows[0].claimed_after_crash)

    def _claim_and_load(self, run_id, owner, lease_expires_at, now_dt) -> r.Claim | None:
        """On PostgreSQL the claim reads what the resume needs in the same statement."""
        claimed = store_pg.claim_and_load(run_id, owner, lease_expires_at, now_dt)
        if claimed is None:
            return None  # not runnable, or another worker got there first
        run, crashed, checkpoint, effects = claimed
        if effects is None:
            return r.Claim(run, crashed)  # a long tail of effects: load() reads it in pages
        bases = []
        if checkpoint is not None and checkpoint.codec == serde.PATCH_CODEC:
            bases = patch_bases(run_id, checkpoint)
        return r.Claim(run, crashed, r.Loaded(run, checkpoint, effects, bases))

    def commit(self, run_id: str, epoch: int, commit: r.Commit) -> r.CommitResult:
        if store_pg.fast_path_applies(commit):
            row = store_pg.commit_in_one_statement(run_id, epoch, commit)
            if row is None:
                self._get(run_id)
                raise FencedError(run_id, epoch)  # a newer owner claimed the run
            if self.notify is not None and (commit.events or commit.checkpoint is not None):
                self.notify(run_id, row[1])
            return r.CommitResult(*row)
        fields = {name: (to_dt(value) if name in RUN_TIME_FIELDS else value)
                  for name, value in commit.run.items()}
        new_events = len(commit.events) + (1 if commit.checkpoint is not None else 0)
        now_dt = datetime.now(dt_timezone.utc)
        fields.update(event_seq=F("event_seq") + new_events, updated_at=now_dt)
        if commit.take_over:
            fields["epoch"] = F("epoch") + 1
        if commit.release:
            fields.update(lease_owner=None, lease_expires_at=None)
        if commit.checkpoint is not None:
            fields["checkpoint_count"] = F("checkpoint_count") + 1
        if fields.get("status") in r.FINAL_STATUSES:
            fields["finished_at"] = now_dt
        with transaction.atomic():
            guard = {"status": commit.expect_status} if commit.expect_status else {}
            if Run.objects.filter(pk=run_id, epoch=epoch, **guard).update(**fields) != 1:
                self._get(run_id)  # RunNotFoundError if it is gone
                raise FencedError(run_id, epoch)  # a newer owner claimed the run
            # An operator's action hands the whole run back; a worker's write (every
            # commit on SQLite) needs a few columns, not the inputs and the output.
            rows = Run.objects if commit.audit is not None else Run.objects.only(*COMMIT_READ)
            committed = rows.get(pk=run_id)
            seq = committed.event_seq - new_events
            if commit.supersede is not None:
                (Effect.objects.filter(superseded_where(committed.branch, commit.supersede),
                                       run_id=run_id, superseded=False)
                 .update(superseded=True))
            if commit.effects:
                Effect.objects.bulk_create(
                    [effect_row(run_id, e) for e in commit.effects], update_conflicts=True,
                    unique_fields=["run", "branch", "step_no", "seq"],
                    update_fields=EFFECT_UPDATE_FIELDS)
            events = list(commit.events)
            number = None
            if commit.checkpoint is not None:
                number = commit.checkpoint.number or committed.checkpoint_count
                cp = checkpoint_row(run_id, commit.checkpoint, number)
                cp.save(force_insert=True)
                faults.hit("after_checkpoint_before_event", committed.agent)
                events.append(("checkpoint", {"number": number, "branch": cp.branch,
                                              "step": cp.step_no, "size": cp.size,
                                              "reason": cp.reason}))
            RunEvent.objects.bulk_create([
                RunEvent(run_id=run_id, seq=seq + i, kind=kind, data=data, created_at=now_dt)
                for i, (kind, data) in enumerate(events, start=1)])
            if commit.audit is not None:
                a = commit.audit
                AuditEntry.objects.create(run_id=run_id, actor=a.actor, action=a.action,
                                          reason=a.reason, before=a.before, after=a.after)
            self._notify_on_commit(run_id, committed.event_seq)
        return r.CommitResult(committed.epoch, committed.event_seq, committed.control, number,
                              run_record(committed) if commit.audit is not None else None)

    def renew(self, run_id: str, epoch: int, lease_expires_at: float) -> str | None:
        updated = Run.objects.filter(pk=run_id, epoch=epoch).update(
            lease_expires_at=to_dt(lease_expires_at))
        if updated != 1:
            self._get(run_id)
            raise FencedError(run_id, epoch)
        return Run.objects.filter(pk=run_id).values_list("control", flat=True).first()

    def due_runs(self, now: float, limit: int = 100) -> list[str]:
        return list(due_runs_queryset(now).order_by("updated_at").values_list("id", flat=True)[:limit])

    def history(self, run_id: str, query: r.HistoryQuery | None = None) -> r.History:
        row = self._get(run_id)
        if query is not None:
            return queried_history(row, query)
        checkpoints = Checkpoint.objects.filter(run_id=run_id).order_by("number")
        effects = Effect.objects.filter(run_id=run_id).order_by("started_at", "id")
        return r.History([checkpoint_record(c) for c in checkpoints],
                         [effect_record(e) for e in effects])

    # --- worker threads -----------------------------------------------------------------
    def close_thread_resources(self) -> None:
        connection.close()

    # --- internals ----------------------------------------------------------------------
    def _get(self, run_id: str) -> Run:
        try:
            return Run.objects.get(pk=run_id)
        except Run.DoesNotExist:
            raise RunNotFoundError(run_id) from None

    def _notify_on_commit(self, run_id: str, seq: int) -> None:
        if self.notify is not None:
            transaction.on_commit(lambda: self.notify(run_id, seq))


def queried_history(row: Run, query: r.HistoryQuery) -> r.History:
    """The parts of the run's history `query` names (see HistoryQuery)."""
    forks = list(Checkpoint.objects.filter(run_id=row.pk, parent_number__isnull=False)
                 if query.forks else [])
    wanted = {c.parent_number for c in forks} | {query.checkpoint} - {None}
    found = {c.number: checkpoint_record(c) for c in forks}
    for c in Checkpoint.objects.filter(run_id=row.pk, number__in=wanted - set(found)):
        found[c.number] = checkpoint_record(c)
    target = found.get(query.checkpoint)
    if target is not None and target.codec == serde.PATCH_CODEC:
        found.update((base.number, base) for base in patch_bases(row.pk, target))
    where = Q(pk__in=[])
    if query.superseded_by is not None:
        where |= superseded_where(row.branch, query.superseded_by)
    if query.step is not None:
        where |= Q(branch=query.step[0], step_no=query.step[1])
    effects = Effect.objects.filter(where, run_id=row.pk, superseded=False)
    return r.History(sorted(found.values(), key=lambda c: c.number),
                     [effect_record(e) for e in effects.order_by("branch", "step_no", "seq")])


def superseded_where(newest_branch: int, supersede: r.Supersede) -> Q:
    """The live effects `supersede` marks: after its step on the kept branches, all of
    them on the others (a run's branches are 1 to its newest, the live one). Named
    branch by branch, so that the scan stays inside the partial index of live effects
    and reads what it marks, not what earlier rollbacks marked."""
    dropped = [b for b in range(1, newest_branch + 1) if b not in supersede.keep_branches]
    return (Q(branch__in=supersede.keep_branches, step_no__gt=supersede.after_step)
            | Q(branch__in=dropped) | Q(branch__gt=newest_branch))


def patch_bases(run_id: str, checkpoint: r.CheckpointRecord) -> list[r.CheckpointRecord]:
    """The checkpoints a patch checkpoint rests on, its full one first."""
    window = Checkpoint.objects.filter(run_id=run_id, branch=checkpoint.branch,
                                       number__lt=checkpoint.number,
                                       number__gte=checkpoint.number - serde.CHAIN_LIMIT - 1)
    chain = serde.chain_to(checkpoint, [checkpoint, *(checkpoint_record(c) for c in window)])
    return chain[:-1]


def live_effects(run_id: str, branch: int, after_step: int) -> list[r.EffectRecord]:
    """The live effects of `branch` after `after_step`, in log order, read in pages.

    The planner estimates `step_no > after_step` from the column's histogram over all
    runs, not this one: with a long history elsewhere in the table it expected tens of
    thousands of rows where there are a handful, and chose a parallel bitmap scan
    and sort whose workers took 10 ms to start (a resume at 50,000 steps took twice
    as long as one at 5,000 or 500,000). A LIMIT makes the cheap start of an index
    scan in the unique position index's order win, whatever the estimate.
    """
    live = Effect.objects.filter(run_id=run_id, branch=branch, step_no__gt=after_step,
                                 superseded=False).order_by("step_no", "seq")
    records, start = [], 0
    while True:
        page = [effect_record(e) for e in live[start:start + LOAD_PAGE]]
        records += page
        if len(page) < LOAD_PAGE:
            return records
        start += LOAD_PAGE


def due_runs_queryset(now: float):
    now_dt = to_dt(now)
    return Run.objects.filter(
        Q(status=r.QUEUED, lease_owner__isnull=True)
        | Q(status__in=[r.QUEUED, r.RUNNING], lease_expires_at__lte=now_dt)
        | Q(status=r.RUNNING, lease_owner__isnull=True)
        | Q(status=r.WAITING, wake_at__lte=now_dt, lease_owner__isnull=True))


# --- row <-> record ------------------------------------------------------------------------
def run_record(row: Run) -> r.RunRecord:
    return r.RunRecord(
        id=row.id, agent=row.agent, agent_version=row.agent_version, inputs=row.inputs,
        status=row.status, branch=row.branch, step_no=row.step_no, epoch=row.epoch,
        lease_owner=row.lease_owner, lease_expires_at=to_ts(row.lease_expires_at),
        control=row.control, output=row.output, error=row.error, attention=row.attention,
        progress_done=row.progress_done, progress_total=row.progress_total,
        progress_message=row.progress_message, wake_at=to_ts(row.wake_at),
        crash_count=row.crash_count, crash_step=row.crash_step, event_seq=row.event_seq,
        created_at=to_ts(row.created_at), updated_at=to_ts(row.updated_at),
        suspended_at=to_ts(row.suspended_at), owner=str(row.owner_id or ""))


def run_row(record: r.RunRecord) -> Run:
    """The Run model of a record as the store wrote it, without reading it back: the
    columns the record does not carry are deferred (read if someone asks)."""
    values = {f: getattr(record, f) for f in RECORD_COLUMNS}
    values.update({name: to_dt(values[name]) for name in RUN_TIME_FIELDS})
    values["owner_id"] = int(record.owner) if str(record.owner).isdigit() else None
    names = [f.attname for f in Run._meta.concrete_fields if f.attname in values]  # its order
    return Run.from_db(DEFAULT_DB_ALIAS, names, [values[name] for name in names])


def checkpoint_record(row: Checkpoint) -> r.CheckpointRecord:
    return r.CheckpointRecord(number=row.number, branch=row.branch, step_no=row.step_no,
                              blob=bytes(row.blob), codec=row.codec, reason=row.reason,
                              parent_number=row.parent_number, created_at=to_ts(row.created_at),
                              base_number=row.base_number)


def checkpoint_row(run_id: str, c: r.CheckpointRecord, number: int) -> Checkpoint:
    return Checkpoint(run_id=run_id, number=number, branch=c.branch, step_no=c.step_no,
                      codec=c.codec, blob=c.blob, size=c.size, reason=c.reason,
                      parent_number=c.parent_number, created_at=to_dt(c.created_at),
                      base_number=c.base_number)


def effect_record(row: Effect) -> r.EffectRecord:
    return r.EffectRecord(
        branch=row.branch, step_no=row.step_no, seq=row.seq, kind=row.kind, tool=row.tool,
        digest=row.digest, key=row.key, idempotent=row.idempotent, status=row.status,
        args_preview=row.args_preview, result=row.result, error=row.error, attempts=row.attempts,
        started_at=to_ts(row.started_at) or 0.0, finished_at=to_ts(row.finished_at),
        resolution=row.resolution, superseded=row.superseded, worker=row.worker, epoch=row.epoch)


def effect_row(run_id: str, e: r.EffectRecord) -> Effect:
    return Effect(run_id=run_id, branch=e.branch, step_no=e.step_no, seq=e.seq, kind=e.kind,
                  tool=e.tool, digest=e.digest, key=e.key, idempotent=e.idempotent,
                  status=e.status, args_preview=e.args_preview, result=e.result, error=e.error,
                  attempts=e.attempts, started_at=to_dt(e.started_at or None),
                  finished_at=to_dt(e.finished_at), resolution=e.resolution,
                  superseded=e.superseded, worker=e.worker, epoch=e.epoch)
