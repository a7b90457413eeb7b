"""The Django admin as the audit trail. History (effects, events, audit entries) is
read-only for everyone, superusers included; runs and checkpoints are read-only
too, because every change to a run goes through an audited operator action."""

from __future__ import annotations

import csv
import difflib
import json

from django.contrib import admin
from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from runs.models import AuditEntry, Checkpoint, Effect, Run, RunEvent, WorkerHeartbeat


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewable by staff with the view permission; nobody adds, edits or deletes."""

    show_full_result_count = False  # no second COUNT(*) over a large table per page
    list_per_page = 50

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def run_link(run_id: str):
    return format_html('<a href="{}">{}</a>', reverse("admin:runs_run_change", args=[run_id]),
                       run_id[:12])


class RunLinkMixin:
    list_select_related = ()

    @admin.display(description="run", ordering="run_id")
    def run_link(self, obj):
        return run_link(obj.run_id)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "agent", "agent_version", "owner", "status", "step_no", "branch",
                    "cost", "created_at", "updated_at"]
    list_filter = ["status", "agent", "agent_version", "created_at"]
    search_fields = ["=id", "owner__username", "agent", "=code_fingerprint"]
    list_select_related = ["owner"]
    date_hierarchy = None
    readonly_fields = ["related", "operator_page"]
    fieldsets = [
        (None, {"fields": ["id", "agent", "agent_version", "owner", "status", "related",
                           "operator_page"]}),
        ("Progress", {"fields": ["branch", "step_no", "progress_done", "progress_total",
                                 "progress_message", "checkpoint_count", "event_seq"]}),
        ("Ownership", {"fields": ["epoch", "lease_owner", "lease_expires_at", "control",
                                  "claimed_after_crash", "crash_count", "crash_step"]}),
        ("Data", {"fields": ["inputs", "output", "error", "attention"]}),
        ("Ledger", {"fields": ["usage", "budget"]}),  # docs/budgets.md
        ("Family", {"fields": ["parent", "spawn_key"]}),  # docs/children.md
        # docs/deploys.md: its agent's code, and the code whose replay of it diverged
        ("Code", {"fields": ["code_fingerprint", "version_refused"]}),
        ("Times", {"fields": ["created_at", "updated_at", "suspended_at", "wake_at",
                              "enqueued_at", "finished_at"]}),
    ]

    @admin.display(description="rows")
    def related(self, obj):
        links = [(reverse(f"admin:runs_{model}_changelist") + f"?run__id__exact={obj.pk}", label)
                 for model, label in [("checkpoint", "checkpoints"), ("effect", "effects"),
                                      ("runevent", "events"), ("auditentry", "audit entries")]]
        return format_html_join(" · ", '<a href="{}">{}</a>', links)

    @admin.display(description="cost")
    def cost(self, obj):
        from runs.durable.policies.budget import money
        return money((obj.usage or {}).get("cost") or 0)

    @admin.display(description="operate")
    def operator_page(self, obj):
        return format_html('<a href="{}">operator view</a>', reverse("operator:run", args=[obj.pk]))


@admin.register(Checkpoint)
class CheckpointAdmin(RunLinkMixin, ReadOnlyAdmin):
    list_display = ["number", "run_link", "branch", "step_no", "reason", "codec", "size",
                    "created_at"]
    list_filter = ["reason", "codec"]
    search_fields = ["=run__id"]
    exclude = ["blob"]
    readonly_fields = ["run_link", "state", "diff"]

    class Media:
        css = {"all": ["css/admin.css"]}

    @admin.display(description="state")
    def state(self, obj):
        return format_html('<pre class="state-json">{}</pre>', pretty(obj))

    @admin.display(description="diff against the previous checkpoint")
    def diff(self, obj):
        previous = previous_checkpoint(obj)
        if previous is None:
            return "— (the first checkpoint of the run)"
        lines = difflib.unified_diff(pretty(previous).splitlines(), pretty(obj).splitlines(),
                                     f"checkpoint {previous.number}", f"checkpoint {obj.number}",
                                     lineterm="", n=2)
        styled = [(line, _diff_style(line)) for line in lines]
        if not styled:
            return f"no change from checkpoint {previous.number}"
        return format_html('<pre>{}</pre>',
                           format_html_join("\n", '<span class="{}">{}</span>',
                                            [(style, line) for line, style in styled]))


def pretty(checkpoint: Checkpoint) -> str:
    try:
        state = checkpoint.state()
    except Exception as exc:  # a corrupt blob is shown, not raised
        return f"<cannot decode: {exc}>"
    return json.dumps(state, indent=2, sort_keys=True, ensure_ascii=False)


def previous_checkpoint(checkpoint: Checkpoint) -> Checkpoint | None:
    """The one before on the same branch, else the checkpoint the branch forked from."""
    earlier = (Checkpoint.objects.filter(run_id=checkpoint.run_id, branch=checkpoint.branch,
                                         number__lt=checkpoint.number).order_by("-number").first())
    if earlier is None and checkpoint.parent_number:
        earlier = Checkpoint.objects.filter(run_id=checkpoint.run_id,
                                            number=checkpoint.parent_number).first()
    return earlier


def _diff_style(line: str) -> str:
    """A class of static/css/admin.css (the CSP allows no style attribute)."""
    if line.startswith("+") and not line.startswith("+++"):
        return "diff-added"
    if line.startswith("-") and not line.startswith("---"):
        return "diff-removed"
    return ""


@admin.register(Effect)
class EffectAdmin(RunLinkMixin, ReadOnlyAdmin):
    list_display = ["key", "run_link", "branch", "step_no", "seq", "kind", "tool", "idempotent",
                    "status", "resolution", "superseded", "started_at"]
    list_filter = ["status", "kind", "idempotent", "superseded", "resolution"]
    search_fields = ["=run__id", "=key", "tool"]


@admin.register(RunEvent)
class RunEventAdmin(RunLinkMixin, ReadOnlyAdmin):
    list_display = ["seq", "run_link", "kind", "created_at"]
    list_filter = ["kind"]
    search_fields = ["=run__id"]


@admin.register(AuditEntry)
class AuditEntryAdmin(RunLinkMixin, ReadOnlyAdmin):
    list_display = ["created_at", "actor", "action", "run_link", "reason"]
    list_filter = ["action", "created_at"]
    search_fields = ["=run__id", "actor", "reason"]
    actions = ["export_csv"]
    readonly_fields = ["run_link", "before_pretty", "after_pretty"]
    exclude = ["before", "after"]

    @admin.action(description="Export selected audit entries as CSV")
    def export_csv(self, request, queryset):
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
        write_audit_csv(response, queryset.order_by("created_at", "id"))
        return response

    @admin.display(description="before")
    def before_pretty(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.before, indent=2, sort_keys=True))

    @admin.display(description="after")
    def after_pretty(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.after, indent=2, sort_keys=True))


def write_audit_csv(stream, entries) -> None:
    writer = csv.writer(stream)
    writer.writerow(["created_at", "actor", "action", "run", "reason", "before", "after"])
    for e in entries.iterator(chunk_size=2000):
        writer.writerow([e.created_at.isoformat(), e.actor, e.action, e.run_id,
                         _no_formula(e.reason), json.dumps(e.before, sort_keys=True),
                         json.dumps(e.after, sort_keys=True)])


def _no_formula(text: str) -> str:
    """Spreadsheets run a cell that starts with = + - @ as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ["host", "pid", "cluster", "started_at", "last_seen", "stopping", "agent_codes"]

    @admin.display(description="agent code")
    def agent_codes(self, obj):
        """What its workers claim (docs/deploys.md): agent vVERSION fingerprint, each."""
        return ", ".join(f"{code.get('agent')} v{code.get('version')} {fp}"
                         for fp, code in sorted((obj.codes or {}).items())) or "—"
