"""A user's actions on their own run: cancel it, answer its question.

With htmx they answer with the refreshed panels (out of band); without, they
redirect back to the run page with a message.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from runs import selectors, services
from runs.durable import DurableError, InputValidationError, InvalidTransitionError
from runs.web.forms import CancelForm
from runs.web.views.panels import input_form, render_panels


@login_required
@require_POST
def run_cancel(request, run_id: str):
    run = selectors.run_get_for_user(request.user, run_id)
    if not selectors.owns(request.user, run):  # operators cancel from the operations dashboard
        return _refused(request, run, "actions", "Only the run's owner can cancel it here.")
    form = CancelForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        services.run_cancel(run_id=run.pk, user=request.user, reason=reason or "cancelled by owner")
    except (InvalidTransitionError, DurableError) as exc:
        return _refused(request, run, "actions", str(exc))
    run.refresh_from_db()
    if request.htmx:
        return HttpResponse(render_panels(request, run, ["actions", "input"], oob=True))
    messages.success(request, "Cancellation requested.")
    return redirect(run)


@login_required
@require_POST
def run_input(request, run_id: str):
    run = selectors.run_get_for_user(request.user, run_id)
    if not selectors.owns(request.user, run):
        return _refused(request, run, "input", "Only the run's owner can answer it.")
    form = input_form(run, data=request.POST)
    if form is None:
        return _refused(request, run, "input", "This run is not waiting for input any more.")
    if form.is_valid():
        try:
            services.run_provide_input(run_id=run.pk, value=form.inputs(), user=request.user)
        except InputValidationError as exc:
            form.add_engine_error(exc.field, str(exc))
        except DurableError as exc:
            return _refused(request, run, "input", str(exc))
        else:
            run.refresh_from_db()
            if request.htmx:
                return HttpResponse(render_panels(request, run, ["input", "actions"], oob=True))
            messages.success(request, "Answer sent.")
            return redirect(run)
    if request.htmx:
        html = render_panels(request, run, ["input"], oob=True, input={"form": form})
        return HttpResponse(html, status=422)
    for field, errors in form.errors.items():
        messages.error(request, f"{field}: {' '.join(errors)}" if field != "__all__"
                       else " ".join(errors))
    return redirect(run)


def _refused(request, run, panel: str, message: str):
    run.refresh_from_db()
    if request.htmx:
        html = render_panels(request, run, [panel], oob=True, **{panel: {"error": message}})
        return HttpResponse(html, status=409)
    messages.error(request, message)
    return redirect(run)
