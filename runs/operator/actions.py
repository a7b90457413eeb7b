"""Operator actions: thin POST views over runs/services.py. Each takes a reason (the
service records it in an AuditEntry with before/after); an engine refusal is shown
as an error and changes nothing."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from runs import services
from runs.durable import DurableError
from runs.durable.control import stays_paused
from runs.models import Run
from runs.operator import selectors
from runs.operator.forms import (
    BulkActionForm,
    ResolveForm,
    RollbackForm,
    RunActionForm,
)
from runs.operator.views import operator_required, run_context
from runs.web.untrusted import is_clean

SIMPLE_ACTIONS = {
    "pause": (services.run_pause, {}, "Pause requested: the run stops at its next effect boundary."),
    "resume": (services.run_resume, {}, "Resumed."),
    "cancel": (services.run_cancel, {}, "Cancel requested."),
    "retry": (services.run_resume, {}, "Retrying from the last checkpoint."),
    "upgrade": (services.run_resume, {"upgrade": True},
                "Continuing on the current version: where it stands if its history replays "
                "cleanly, else from its last checkpoint on a new branch, the calls logged "
                "since carried over (none is made again)."),
    "retry_now": (services.run_retry_now, {}, "The call's next attempt starts now."),
    "give_up": (services.run_give_up, {},
                "Gave up retrying: the call fails with a tool error the agent sees."),
}


@require_POST
@operator_required
def act(request, run_id):
    run = get_object_or_404(Run, pk=run_id)
    form = RunActionForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("operator:run", run_id=run.pk)
    service, extra, done = SIMPLE_ACTIONS[form.cleaned_data["action"]]
    try:
        service(run_id=run.pk, user=request.user, reason=form.cleaned_data["reason"], **extra)
    except DurableError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)
    return redirect("operator:run", run_id=run.pk)


@require_http_methods(["GET", "POST"])
@operator_required
def rollback(request, run_id):
    """GET ?checkpoint=k: what rolling back to k undoes. POST: do it, with a reason and
    the choice of resuming or staying paused (the preview is read only to be shown)."""
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    number = _int(request.POST.get("checkpoint") or request.GET.get("checkpoint"))
    then = "pause" if stays_paused(run) else "resume"
    form = RollbackForm(request.POST or None, initial={"checkpoint": number, "then": then,
                                                       "children": "cancel"})
    error = None if number is not None else "Choose a checkpoint number."
    if request.method == "POST" and number is not None and form.is_valid():
        try:
            services.run_rollback(run_id=run.pk, checkpoint=number, user=request.user,
                                  reason=form.cleaned_data["reason"], resume=form.resume(),
                                  children=form.children_choice())
        except DurableError as exc:
            error = str(exc)
        else:
            messages.success(request, _rolled_back(number, form.resume()))
            return redirect("operator:run", run_id=run.pk)
    preview = None
    if number is not None:
        try:
            preview = services.run_rollback_preview(run_id=run.pk, checkpoint=number)
        except DurableError as exc:
            error = error or str(exc)
    if request.method == "POST":  # not done: a form error (400) or the engine refused (409)
        status = 409 if error and form.is_valid() else 400
    else:
        status = 400 if error else 200
    return render(request, "operator/rollback.html",
                  {"run": run, "form": form, "preview": preview, "error": error,
                   "checkpoint": number, **selectors.rollback_pages(preview, request.GET)},
                  status=status)


def _rolled_back(number: int, resumed: bool) -> str:
    then = "it is queued to run" if resumed else "it is paused: resume it when ready"
    return (f"Rolled back to checkpoint {number}: the run continues on a new branch with new "
            f"idempotency keys; {then}.")


@require_POST
@operator_required
def resolve(request, run_id):
    run = get_object_or_404(Run, pk=run_id)
    form = ResolveForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("operator:run", run_id=run.pk)
    data = form.cleaned_data
    try:
        services.run_resolve_effect(run_id=run.pk, seq=data["seq"], resolution=data["resolution"],
                                    result=data["result"], user=request.user,
                                    reason=data["reason"])
    except DurableError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"In-doubt effect resolved ({data['resolution']}); the run "
                                  "is queued again.")
    return redirect("operator:run", run_id=run.pk)


@require_POST
@operator_required
def bulk(request):
    form = BulkActionForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect(_back(request))
    action = form.cleaned_data["action"]
    service = SIMPLE_ACTIONS[action][0]
    done, refused = 0, []
    for run_id in form.cleaned_data["run"]:
        try:
            service(run_id=run_id, user=request.user, reason=form.cleaned_data["reason"])
            done += 1
        except DurableError as exc:
            refused.append(f"{run_id[:8]}: {exc}")
    total = len(form.cleaned_data["run"])
    messages.success(request, f"{action}: {done} of {total} run(s) done.")
    if refused:
        shown = "; ".join(refused[:10]) + (f"; and {len(refused) - 10} more" if len(refused) > 10 else "")
        messages.error(request, f"{len(refused)} refused: {shown}")
    return redirect(_back(request))


def _back(request) -> str:
    from django.urls import reverse
    from django.utils.http import url_has_allowed_host_and_scheme

    target = request.POST.get("next", "")
    # a path on this host only: a bare word would be taken for a URL pattern's name
    if (target.startswith("/") and is_clean(target)
            and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()})):
        return target
    return reverse("operator:dashboard")


def _form_errors(request, form) -> None:
    for field, errors in form.errors.items():
        label = "" if field == "__all__" else f"{field}: "
        for error in errors:
            messages.error(request, f"{label}{error}")


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


__all__ = ["act", "bulk", "resolve", "rollback", "run_context"]
