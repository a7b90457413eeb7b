"""The operators' Deploys page: the runs waiting for a worker of their code, grouped by
agent and code with why they wait, the codes the live clusters serve, and the bulk
upgrade: a preview of what it does (upgrade.preview), then a confirm with a reason."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from runs.deploys import selectors, services
from runs.deploys.forms import UpgradeForm
from runs.durable import DurableError
from runs.operator.views import live_context, operator_required
from runs.worker.stalls import mark_stalls


@require_http_methods(["GET", "POST"])
@operator_required
def deploys(request):
    codes = selectors.live_codes()
    clusters = {code.fingerprint: list(code.clusters) for code in codes}
    waiting = mark_stalls(selectors.version_waits())
    groups = selectors.wait_groups(waiting, clusters)
    form = UpgradeForm(request.POST or None, groups=[g.key for g in groups])
    context = {"groups": groups, "codes": codes, "waiting_count": len(waiting),
               "shown_limit": selectors.WAITS_SHOWN, "form": form, "preview": None,
               "max_runs": services.MAX_RUNS, "ops_section": "deploys", **live_context()}
    if request.method == "GET":
        return render(request, "deploys/page.html", context)
    if not form.is_valid():
        return _refused(request, context, form)
    if form.confirming:
        return _upgrade(request, form)
    run_ids, capped = _chosen(form, groups)
    try:
        context["preview"] = services.upgrade_preview(run_ids=run_ids)
    except (services.SelectionError, DurableError) as exc:
        form.add_error(None, str(exc))
        return _refused(request, context, form)
    context.update(preview_ids=run_ids, capped=capped)
    return render(request, "deploys/page.html", context)


def _chosen(form, groups) -> tuple[list[str], int]:
    """The runs to preview: those ticked, or a whole group's, the first MAX_RUNS of it
    (and how many the group had, when more)."""
    key = form.cleaned_data["group"]
    if not key:
        return form.cleaned_data["run"], 0
    group = next(g for g in groups if g.key == key)
    ids = [run.pk for run in group.runs]
    return ids[:services.MAX_RUNS], len(ids) if len(ids) > services.MAX_RUNS else 0


def _upgrade(request, form):
    try:
        result = services.upgrade_runs(run_ids=form.cleaned_data["run"], user=request.user,
                                       reason=form.cleaned_data["reason"])
    except services.SelectionError as exc:
        messages.error(request, str(exc))
        return redirect("operator:deploys")
    done, failed = result["upgraded"], result["failed"]
    messages.success(request, f"Upgraded {len(done)} of {len(done) + len(failed)} run(s): "
                              "each is queued on this code, and its audit trail has the "
                              "reason.")
    if failed:
        shown = "; ".join(f"{run_id[:8]}: {why}" for run_id, why in list(failed.items())[:10])
        messages.error(request, f"{len(failed)} not upgraded: {shown}")
    return redirect("operator:deploys")


def _refused(request, context, form):
    """The form again with its errors (400), and the preview being confirmed, if any."""
    run_ids = form.cleaned_data.get("run") if hasattr(form, "cleaned_data") else None
    if run_ids and form.data.get("do") == "upgrade":
        try:
            context.update(preview=services.upgrade_preview(run_ids=run_ids),
                           preview_ids=run_ids)
        except (services.SelectionError, DurableError):
            pass  # the errors shown already say what to fix
    return render(request, "deploys/page.html", context, status=400)
