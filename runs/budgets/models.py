"""The price table, budgets per user and per agent, approval policies and requests.

The ledger itself is on the engine's rows (`Effect.usage`, `Run.usage`, `Run.budget`):
written in the commit that logs each metered call, so it cannot drift from the log."""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.durable.policies import approvals as a


class ModelPrice(models.Model):
    """What a model's tokens cost, in dollars per million. A row here wins over the
    settings' table (AGENTOPS["MODEL_PRICES"]); a model in neither costs nothing."""

    model = models.CharField(max_length=200, unique=True)
    prompt_per_million = models.DecimalField(max_digits=12, decimal_places=4,
                                             help_text="dollars per million prompt tokens")
    completion_per_million = models.DecimalField(max_digits=12, decimal_places=4,
                                                 help_text="dollars per million completion tokens")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]

    def __str__(self):
        return f"{self.model}: ${self.prompt_per_million}/${self.completion_per_million} per M"


class Period(models.TextChoices):
    DAY = "day", "per day"
    MONTH = "month", "per month"


class Budget(models.Model):
    """A quota: what one user's runs, or one agent's runs, may spend per day or month
    (UTC). Reached, their next metered call waits in needs_attention."""

    class Scope(models.TextChoices):
        USER = "user", "user"
        AGENT = "agent", "agent"

    scope = models.CharField(max_length=10, choices=Scope.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.CASCADE, related_name="budgets")
    agent = models.CharField(max_length=100, blank=True, default="")
    period = models.CharField(max_length=10, choices=Period.choices, default=Period.DAY)
    cost = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True,
                               help_text="dollars; empty: no cost limit")
    tokens = models.BigIntegerField(null=True, blank=True, help_text="empty: no token limit")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "agent", "user_id", "period"]
        constraints = [
            models.UniqueConstraint(fields=["user", "period"], condition=Q(scope="user"),
                                    name="budget_one_per_user_period"),
            models.UniqueConstraint(fields=["agent", "period"], condition=Q(scope="agent"),
                                    name="budget_one_per_agent_period"),
            models.CheckConstraint(condition=(Q(scope="user", user__isnull=False, agent="")
                                          | Q(scope="agent", user__isnull=True) & ~Q(agent="")),
                                   name="budget_names_its_subject"),
        ]

    def __str__(self):
        who = self.agent if self.scope == "agent" else getattr(self.user, "username", "?")
        return f"{self.scope} {who} {self.get_period_display()}"

    def limits(self) -> dict:
        return {k: v for k, v in (("cost", None if self.cost is None else float(self.cost)),
                                  ("tokens", self.tokens)) if v is not None}


class BudgetChange(models.Model):
    """The audit of quotas (a run's own budget is audited on the run: AuditEntry)."""

    actor = models.CharField(max_length=150)
    budget = models.ForeignKey(Budget, null=True, on_delete=models.SET_NULL, related_name="changes")
    subject = models.CharField(max_length=200)
    before = models.JSONField(default=dict)
    after = models.JSONField(default=dict)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.actor} changed {self.subject}"


class Fallback(models.TextChoices):
    DENY = "deny", "deny (the tool raises ApprovalDeniedError)"
    SKIP = "skip", "skip (the call returns nothing)"


class Approvers(models.TextChoices):
    OWNER = "owner", "the run's owner"
    OPERATORS = "operators", "operators"
    GROUP = "group", "a named group"


class ApprovalPolicy(models.Model):
    """Calls that need a person's yes, besides the rules agents declare in code."""

    name = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    agent = models.CharField(max_length=100, blank=True, default="", help_text="empty: any agent")
    tool = models.CharField(max_length=200, help_text="the tool's registered name")
    condition = models.CharField(max_length=a.MAX_PREDICATE, blank=True, default="",
                                 help_text="e.g. amount > 1000 or inputs.approve_notes; "
                                           "empty: every call of the tool")
    approvers = models.CharField(max_length=10, choices=Approvers.choices, default=Approvers.OWNER)
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.PROTECT)
    timeout_seconds = models.PositiveIntegerField(null=True, blank=True,
                                                  help_text="empty: wait until someone answers")
    fallback = models.CharField(max_length=10, choices=Fallback.choices, default=Fallback.DENY)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "approval policies"

    def __str__(self):
        return self.name

    def rule(self) -> a.ApprovalRule:
        approvers = f"group:{self.group.name}" if self.approvers == "group" and self.group else \
            self.approvers
        return a.ApprovalRule(tool=self.tool, when=self.condition, approvers=approvers,
                              timeout=self.timeout_seconds, fallback=self.fallback,
                              agent=self.agent, name=self.name)


class Approval(models.Model):
    """One request, bound to one call: its run, key (its position) and argument digest."""

    class Status(models.TextChoices):
        PENDING = a.PENDING
        APPROVED = a.APPROVED
        DENIED = a.DENIED
        EXPIRED = a.EXPIRED

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="approvals",
                            db_constraint=False)
    key = models.CharField(max_length=200)
    digest = models.CharField(max_length=64)
    tool = models.CharField(max_length=200)
    args_preview = models.TextField(blank=True, default="")
    arguments = models.JSONField(default=dict)
    rule = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    requested_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    used_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-requested_at"]
        constraints = [models.UniqueConstraint(fields=["run", "key", "digest"],
                                               name="approval_one_per_call")]
        indexes = [models.Index(fields=["status", "-requested_at"], name="approval_inbox")]

    def __str__(self):
        return f"{self.tool} ({self.status})"

    @property
    def approvers(self) -> str:
        return self.rule.get("approvers", "owner")


class QuotaReservation(models.Model):
    """A metered call let through under a quota whose usage is not logged yet: a call in
    flight, counted against the quota at its estimate (runs/budgets/quotas.py).

    It counts only while its run still has the epoch that made it and a live lease, so
    a worker that dies mid-call frees its reservation when its lease runs out (or at
    once, when another worker claims the run), never blocks the quota for good."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="reservations")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="reservations",
                            db_constraint=False)
    key = models.CharField(max_length=200, help_text="the call's idempotency key")
    epoch = models.BigIntegerField(help_text="the run's fencing epoch when it was let through")
    cost = models.FloatField(null=True, blank=True, help_text="estimate; empty: unknown")
    tokens = models.BigIntegerField(null=True, blank=True, help_text="estimate; empty: unknown")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["budget", "key"],
                                               name="reservation_one_per_call")]
        indexes = [models.Index(fields=["key"], name="reservation_key")]

    def __str__(self):
        return f"{self.key} under {self.budget_id}"
