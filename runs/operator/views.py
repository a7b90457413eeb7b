"""Operator pages: all runs, the attention queue, workers, and one run with its controls.
Reads only; the actions are in runs/operator/actions.py."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from runs.durable import records as r
from runs.durable.upgrade import VERSION_WAIT
from runs.models import Run
from runs.operator import selectors
from runs.operator.forms import (
    BulkActionForm,
    ResolveForm,
    RollbackForm,
    RunActionForm,
    RunFilterForm,
)
from runs.storage import retention
from runs.worker.stalls import mark_stalls, stall_of

PERMISSION = "runs.operate_run"


def live_context() -> dict:
    """What a live operator page needs: how often to poll while its socket is down."""
    return {"ops_poll": settings.AGENTOPS["OPS_POLL_SECONDS"]}


def operator_required(view):
    """Logged in (else to the login page) and an operator (else 403, nothing shown)."""
    return login_required(permission_required(PERMISSION, raise_exception=True)(view))


@require_GET
@operator_required
def dashboard(request):
    form = RunFilterForm(request.GET or None)
    filters = form.filters() if request.GET else {}
    page = selectors.keyset_page(selectors.filtered_runs(filters), filters.get("sort", "-created"),
                                 after=request.GET.get("after"), before=request.GET.get("before"))
    mark_stalls(page.runs)
    sizes = retention.stored_bytes([run.pk for run in page.runs])
    for run in page.runs:
        run.stored_bytes = sizes.get(run.pk, 0)
    context = {"form": form, "page": page, "bulk_form": BulkActionForm(), "ops_section": "runs",
               "attention_count": selectors.attention_count(), "filtered": bool(filters),
               **live_context()}
    if request.htmx and request.htmx.target == "runs-table":
        return render(request, "operator/_runs_table.html", context)
    return render(request, "operator/dashboard.html", context)


@require_GET
@operator_required
def storage(request):
    return render(request, "operator/_storage.html",
                  {"total_bytes": selectors.total_stored_bytes()})


@require_GET
@operator_required
def costs(request):
    # Sums over every run, like the storage total: loaded after the page, so the
    # dashboard's own queries stay those of one page of runs.
    return render(request, "operator/_costs.html")


@require_GET
@operator_required
def attention(request):
    runs = selectors.attention_queue(include_failed=request.GET.get("failed") != "0")
    mark_stalls(runs)
    in_doubt = selectors.in_doubt_effects(runs)
    for run in runs:
        run.in_doubt_effect = in_doubt.get(run.pk)
    context = {"runs": runs, "limit": selectors.ATTENTION_LIMIT, "ops_section": "attention",
               "include_failed": request.GET.get("failed") != "0", **live_context()}
    if request.htmx and request.htmx.target == "attention-list":
        return render(request, "operator/_attention_list.html", context)
    return render(request, "operator/attention.html", context)


@require_GET
@operator_required
def workers(request):
    context = {**selectors.workers_overview(), "ops_section": "workers", **live_context()}
    if request.htmx and request.htmx.target == "workers-panel":
        return render(request, "operator/_workers_panel.html", context)
    return render(request, "operator/workers.html", context)


@require_GET
@operator_required
def run_page(request, run_id):
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    return render(request, "operator/run.html", run_context(run))


@require_GET
@operator_required
def run_live(request, run_id):
    """Polled every second by the run page: 204 when nothing changed, else the new
    events, the summary, and (when the run's course changed) the controls."""
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    try:
        after = int(request.GET.get("after", 0))
    except ValueError:
        after = 0
    if run.event_seq <= after and request.GET.get("token") == control_token(run):
        return HttpResponse(status=204)
    context = run_context(run, events=selectors.events_after(run, after), after=after)
    context["controls_changed"] = request.GET.get("token") != control_token(run)
    return render(request, "operator/_run_live.html", context)


def run_context(run: Run, events=None, after: int = 0) -> dict:
    mark_stalls([run])
    detail = selectors.run_detail(run)
    if events is not None:
        detail["events"] = events
    attention = run.attention or {}
    resolve_form = ResolveForm(initial={"seq": attention.get("seq"), "resolution": "done"})
    actions = available_actions(run)
    return {"run": run, **detail, "actions": actions, "ops_section": "runs", **live_context(),
            "simple_actions": [(a, RunActionForm.ACTIONS[a]) for a in actions
                               if a in RunActionForm.ACTIONS],
            "last_seq": detail["events"][-1].seq if detail["events"] else after,
            "action_form": RunActionForm(), "rollback_form": RollbackForm(),
            "resolve_form": resolve_form, "token": control_token(run),
            "attention": attention if run.status == r.NEEDS_ATTENTION else None}


def control_token(run: Run) -> str:
    """What the controls and the summary depend on: when it changes, the page
    re-renders them (a stall comes with no event, so it is part of the token)."""
    stall = stall_of(run)
    return (f"{run.status}.{run.branch}.{run.control or '-'}."
            f"{(run.attention or {}).get('kind', '-')}.{stall.kind if stall else '-'}")


def available_actions(run: Run) -> list[str]:
    """The actions that make sense now (the engine still checks each one)."""
    kind = (run.attention or {}).get("kind")
    by_status = {
        # a rollback takes a running run over: its worker is fenced off at its next write
        r.RUNNING: (["resume"] if run.control == r.PAUSE else ["pause"]) + ["cancel", "rollback"],
        r.QUEUED: ["pause", "cancel", "rollback"],
        r.WAITING: ["pause", "cancel", "rollback"],
        r.PAUSED: ["resume", "cancel", "edit", "rollback"],
        r.FAILED: ["retry", "upgrade", "edit", "rollback"],
        r.SUCCEEDED: ["rollback"],
        r.CANCELLED: ["rollback"],
    }
    if kind == VERSION_WAIT and run.status not in r.FINAL_STATUSES:
        # handed back for a worker of its code: or moved to this code (docs/deploys.md)
        return ["upgrade", *by_status.get(run.status, [])]
    if run.status == r.WAITING and kind == "retry":
        return ["retry_now", "give_up", *by_status[r.WAITING]]
    if run.status == r.NEEDS_ATTENTION:
        if kind == "in_doubt":
            return ["resolve", "cancel", "rollback"]
        if kind == "version_drift":
            return ["upgrade", "cancel", "rollback", "edit"]
        return ["resume", "upgrade", "cancel", "edit", "rollback"]
    return by_status.get(run.status, [])


