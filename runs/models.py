"""The system of record. Constraints here make the engine's invariants hold in the
database itself: one effect per position and per idempotency key, one event per
(run, seq), one checkpoint per (run, number).

The run's checkpoints, effects and events have no database foreign key (the
relations stay, and so does CASCADE, done by the ORM): every row of theirs is
inserted in the transaction that first updates its run row under the fencing epoch
(on PostgreSQL, by a statement that selects from that UPDATE), so none can exist
without its run, and nothing deletes runs (the admin refuses; retention drops
checkpoints, events and effects, never a run). The key's check at commit was a tenth of
an effect's cost on PostgreSQL (0.506 -> 0.457 ms an effect, with and without, in one process)."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone

from runs.durable import records as r


class RunStatus(models.TextChoices):
    QUEUED = r.QUEUED, "queued"
    RUNNING = r.RUNNING, "running"
    PAUSED = r.PAUSED, "paused"
    WAITING = r.WAITING, "waiting"
    NEEDS_ATTENTION = r.NEEDS_ATTENTION, "needs attention"
    SUCCEEDED = r.SUCCEEDED, "succeeded"
    FAILED = r.FAILED, "failed"
    CANCELLED = r.CANCELLED, "cancelled"


class Run(models.Model):
    id = models.CharField(primary_key=True, max_length=32, editable=False)
    # Indexed by run_owner_created (its first column), not by a second index of its own.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="runs", db_index=False)
    agent = models.CharField(max_length=100)
    agent_version = models.CharField(max_length=50)
    inputs = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    branch = models.IntegerField(default=1)
    step_no = models.IntegerField(default=0, help_text="steps completed")
    # Fencing: every claim increments it, every engine write is conditional on it.
    epoch = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    claimed_after_crash = models.BooleanField(default=False)
    control = models.CharField(max_length=16, null=True, blank=True,
                               help_text="pause/cancel waiting for the owner's next effect boundary")
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attention = models.JSONField(null=True, blank=True)
    progress_done = models.FloatField(default=0)
    progress_total = models.FloatField(default=0)
    progress_message = models.CharField(max_length=500, blank=True, default="")
    wake_at = models.DateTimeField(null=True, blank=True)
    crash_count = models.IntegerField(default=0)
    crash_step = models.IntegerField(default=-1)
    # With crash_step, the run's progress at its last claim (runs/durable/crashes.py):
    # the effects with an outcome since its checkpoint. A database default too, so
    # that a worker of the code before this column can still insert runs in a deploy.
    crash_effects = models.IntegerField(default=0, db_default=0)
    event_seq = models.BigIntegerField(default=0)
    checkpoint_count = models.IntegerField(default=0)
    suspended_at = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # the ledger and the budget (docs/budgets.md): written by the engine's commits
    usage = models.JSONField(default=dict, blank=True,
                             help_text="cost, prompt_tokens, completion_tokens, calls")
    budget = models.JSONField(null=True, blank=True, help_text="cost (dollars) and/or tokens")
    # A child run (docs/children.md): the run that spawned it, and the idempotency key of
    # that spawn effect, unique, so that a replayed spawn finds its child again. No
    # database foreign key, like the run's logs: nothing deletes runs.
    # Both indexed by Meta's partial indexes: most runs have neither, and a field's own
    # index on a varchar comes with a `_like` twin on PostgreSQL.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.DO_NOTHING,
                               db_constraint=False, related_name="children", db_index=False)
    spawn_key = models.CharField(max_length=120, null=True, blank=True)
    # The code the run belongs to (runs/durable/versions.py, docs/deploys.md): a
    # fingerprint of its agent's code beside the declared agent_version, and the
    # fingerprint of a code whose replay of its history diverged.
    code_fingerprint = models.CharField(max_length=32, blank=True, default="")
    version_refused = models.CharField(max_length=32, null=True, blank=True)
    # Event and effect retention (runs/storage/event_retention.py, docs/retention.md): the
    # events numbered below events_pruned_before, but its status events, are deleted;
    # how many events and effects were, and when the last pass over the run ended.
    # Database defaults too, so that a worker of the code before them can insert runs.
    events_pruned_before = models.BigIntegerField(default=0, db_default=0)
    events_pruned = models.BigIntegerField(default=0, db_default=0)
    effects_pruned = models.BigIntegerField(default=0, db_default=0)
    pruned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("operate_run", "Can operate every run (pause, resume, cancel, roll back)")]
        # Only what a page, the API or the claim reads by: an update of the run that is
        # not HOT (a claim, a change of status) writes an entry into every index, and the
        # effect path's updates must touch no indexed column to stay HOT (fillfactor:
        # migration 0003; tests/test_run_row_pg.py lists them and explains each reader).
        # The primary key's `_like` twin is dropped by migration 0057 (run ids are
        # searched by range: runs/operator/selectors.py, search_q).
        constraints = [
            models.UniqueConstraint(fields=["spawn_key"], name="run_spawn_key",
                                    condition=Q(spawn_key__isnull=False)),
        ]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="run_owner_created"),
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            models.Index(fields=["agent", "-created_at"], name="run_agent_created"),
            models.Index(fields=["-created_at"], name="run_created"),
            # The sweep's claimable runs. lease_expires_at is deliberately not indexed:
            # every effect commit extends the lease, and an update that touches no
            # indexed column can be a HOT update (no index writes).
            models.Index(fields=["status"], name="run_sweep_active",
                         condition=Q(status__in=[r.QUEUED, r.RUNNING])),
            models.Index(fields=["wake_at"], name="run_sweep_wake", condition=Q(status=r.WAITING)),
            # A worker's runs are found by the prefix of their lease owner (host:pid:),
            # which a LIKE reads from a pattern_ops index under any collation.
            models.Index(fields=["lease_owner"], name="run_lease_owner",
                         opclasses=["varchar_pattern_ops"],
                         condition=Q(lease_owner__isnull=False)),
            models.Index(fields=["parent"], name="run_parent", condition=Q(parent__isnull=False)),
            # The Workers page's runs finished in the last minutes (runs/operator/
            # selectors.py, workers_overview): a scan of every run without it (633 ms at
            # 1,000,000 runs). Written once a run, when it ends, by an update that changes
            # its status anyway (not HOT).
            models.Index(fields=["finished_at"], name="run_finished",
                         condition=Q(finished_at__isnull=False)),
            # Event retention's candidates: the ended runs it has not pruned since they
            # ended, without reading the runs it has (runs/storage/event_retention.py).
            # Only an ending and retention itself write its columns.
            models.Index(fields=["finished_at"], name="run_retention_due",
                         condition=Q(finished_at__isnull=False)
                         & (Q(pruned_at__isnull=True) | Q(pruned_at__lt=F("finished_at")))),
        ]

    def __str__(self):
        return f"{self.agent} {self.id[:8]} ({self.status})"

    def get_absolute_url(self):
        return reverse("runs:detail", args=[self.id])

    @property
    def is_final(self) -> bool:
        return self.status in r.FINAL_STATUSES

    @property
    def progress_percent(self) -> float:
        if not self.progress_total:
            return 100.0 if self.status == r.SUCCEEDED else 0.0
        return max(0.0, min(100.0, 100.0 * self.progress_done / self.progress_total))


class Checkpoint(models.Model):
    # indexed by the (run, number) constraint
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints",
                            db_index=False, db_constraint=False)
    number = models.IntegerField()
    branch = models.IntegerField()
    step_no = models.IntegerField()
    codec = models.CharField(max_length=20)
    blob = models.BinaryField()
    size = models.IntegerField()
    reason = models.CharField(max_length=20, default="step")
    parent_number = models.IntegerField(null=True, blank=True)
    base_number = models.IntegerField(null=True, blank=True,
                                      help_text="for a patch: the checkpoint it patches")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="checkpoint_unique_number")]
        # A branch's latest checkpoint (step_no DESC, number DESC: runs/storage/pg.py, the
        # claim) is read by scanning this index backwards. Ascending, a run's new entries
        # go to the right end of its range, and PostgreSQL fills a page it splits there
        # to 90%; descending (as it was), they went to the left end, where each split
        # leaves two half-full pages: 106 B of index a checkpoint, against about 60.
        indexes = [models.Index(fields=["run", "branch", "step_no", "number"],
                                name="checkpoint_latest")]

    def __str__(self):
        return f"checkpoint {self.number} of {self.run_id[:8]} (branch {self.branch}, step {self.step_no})"

    def state(self):
        """The decoded state; a patch checkpoint is resolved against its bases."""
        from runs.durable import serde

        if self.codec != serde.PATCH_CODEC:
            return serde.decode_state(bytes(self.blob), self.codec)
        return serde.checkpoint_state(self, list(chain_rows(self.run_id, self.branch,
                                                            self.number)))


def chain_rows(run_id: str, branch: int, number: int):
    """The checkpoints of `branch` from the full checkpoint a patch checkpoint `number`
    rests on up to it: a patch chain's length is chosen by size (runs/durable/serde.py),
    so its start is found, not counted back to."""
    from runs.durable import serde

    branch_rows = Checkpoint.objects.filter(run_id=run_id, branch=branch, number__lte=number)
    full = (branch_rows.exclude(codec=serde.PATCH_CODEC).order_by("-number")
            .values("number")[:1])
    return branch_rows.filter(number__gte=models.Subquery(full))


class Effect(models.Model):
    # indexed by the (run, branch, step_no, seq) constraint
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="effects",
                            db_index=False, db_constraint=False)
    branch = models.IntegerField()
    step_no = models.IntegerField()
    seq = models.IntegerField()
    kind = models.CharField(max_length=10)
    tool = models.CharField(max_length=200)
    digest = models.CharField(max_length=64)
    key = models.CharField(max_length=200, help_text="idempotency key: (run, branch, step, seq)")
    idempotent = models.BooleanField(default=False)
    status = models.CharField(max_length=10)
    args_preview = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=10, blank=True, default="")
    superseded = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True, default="")
    epoch = models.BigIntegerField(default=0, help_text="the fencing epoch of the writer")
    usage = models.JSONField(null=True, blank=True,
                             help_text="a metered call's model, tokens and cost")

    class Meta:
        ordering = ["run", "branch", "step_no", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "branch", "step_no", "seq"], name="effect_unique_position"),
            models.UniqueConstraint(fields=["key"], name="effect_unique_key"),
        ]
        # What a rollback marks superseded, found without reading the effects an
        # earlier rollback already marked (runs/storage/orm.py, superseded_effects).
        indexes = [models.Index(fields=["run", "branch", "step_no"], name="effect_live_position",
                                condition=models.Q(superseded=False)),
                   # the ledger's days and the quotas' periods (runs/budgets/ledger.py)
                   models.Index(fields=["finished_at"], name="effect_metered_finished",
                                condition=models.Q(usage__isnull=False))]

    def __str__(self):
        return f"{self.tool} @ {self.branch}/{self.step_no}/{self.seq} ({self.status})"

    @property
    def duration_ms(self):
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds() * 1000
        return None


class RunEvent(models.Model):
    # indexed by the (run, seq) constraint
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events",
                            db_index=False, db_constraint=False)
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=30)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="event_unique_seq")]
        # A run's status events (its timeline's failures: runs/selectors.py,
        # run_trouble_events) without reading its other events: a run of 1,000,000 events
        # took 360 ms through (run, seq) (bench/scale.py). Only status events, a few a
        # run, are written into it.
        indexes = [models.Index(fields=["run", "seq"], name="event_run_status",
                                condition=Q(kind="status"))]

    def __str__(self):
        return f"#{self.seq} {self.kind}"

    def as_message(self) -> dict:
        return {"seq": self.seq, "kind": self.kind, "data": self.data,
                "at": self.created_at.isoformat()}


class AuditEntry(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="audit_entries")
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=30)
    reason = models.TextField(blank=True, default="")
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "audit entries"

    def __str__(self):
        return f"{self.actor} {self.action} {self.run_id[:8]}"


class WorkerHeartbeat(models.Model):
    """A worker tree's main process, written by the tree's duties (runs/worker/heartbeat.py): what
    the operators' Workers page knows about hosts and processes that hold no run."""

    host = models.CharField(max_length=200)
    pid = models.IntegerField()
    cluster = models.CharField(max_length=100, blank=True, default="")
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    processes = models.JSONField(default=list, help_text="the cluster's child processes")
    # The agent code its workers have loaded, {fingerprint: {agent, version, upgrade}}:
    # which runs they claim (runs/durable/versions.py). A cluster that is stopping
    # serves no code any more: another may take its runs over at once.
    codes = models.JSONField(default=dict, blank=True)
    stopping = models.BooleanField(default=False)

    class Meta:
        ordering = ["host", "pid"]
        constraints = [models.UniqueConstraint(fields=["host", "pid"], name="heartbeat_unique_process")]

    def __str__(self):
        return f"{self.cluster or 'cluster'} {self.host}:{self.pid}"
