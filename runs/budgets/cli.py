"""`manage.py runs approve|deny|budget`: answer an approval and change a run's budget
from a shell (the subcommands of runs/management/commands/runs.py).

Without --user the shell acts as "cli", trusted like the other shell controls; with
--user it acts as that user and the pages' permission rules apply."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError

from runs.durable.policies import approvals as a

from . import services
from .models import Approval

SUBCOMMANDS = ("approve", "deny", "budget")


def add_subcommands(sub, subcommand, add_control_arguments) -> None:
    for name, verb in (("approve", "approve"), ("deny", "deny")):
        p = subcommand(sub, name, f"{verb} the call a run waits for (docs/approvals.md)",
                       f"{verb.capitalize()} the pending approval request of RUN_ID (or the "
                       "one --approval names). The run goes on: approved, the call is made "
                       "once; denied, the tool raises ApprovalDeniedError in the agent.")
        add_control_arguments(p)
        p.add_argument("--approval", default=None, help="the request's id (default: the one "
                                                        "the run waits for)")
    p = subcommand(sub, "budget", "set a run's budget (docs/budgets.md)",
                   "Set the run's budget; a run waiting on its budget goes on where it stopped.")
    add_control_arguments(p)
    p.add_argument("--cost", type=float, default=None, help="dollars")
    p.add_argument("--tokens", type=int, default=None, help="prompt + completion tokens")


def approval_of(run, approval_id: str | None) -> Approval:
    rows = Approval.objects.filter(run_id=run.pk)
    if approval_id:
        row = rows.filter(pk=approval_id).first()
    else:
        row = rows.filter(pk=(run.attention or {}).get("approval") or "").first() or \
            rows.filter(status=a.PENDING).order_by("requested_at").first()
    if row is None:
        raise CommandError(f"run {run.pk} has no {'such' if approval_id else 'pending'} "
                           "approval request")
    return row


def handle(command, name: str, run, opts, actor, reason: str) -> None:
    try:
        if name == "budget":
            budget = {k: opts[k] for k in ("cost", "tokens") if opts[k] is not None}
            services.set_run_budget(run_id=run.pk, user=actor, budget=budget or None,
                                    reason=reason)
            return
        row = approval_of(run, opts["approval"])
        row = services.decide_approval(approval_id=row.pk, user=actor, approve=name == "approve",
                                       reason=reason)
        command.stdout.write(f"{row.tool}({row.args_preview[:200]}): {row.status} by "
                             f"{row.decided_by}")
    except PermissionDenied as exc:
        raise CommandError(str(exc) or "not allowed") from None
