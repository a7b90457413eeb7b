"""Pages of budgets and approvals: the inbox, answering a request, a run's budget, the
ledger with its CSV export, and the operators' quotas.

Refusals are messages (400 for bad input, 403 when the rule says no, 409 when the
run or request moved on), never a 500, and change nothing."""

from __future__ import annotations

import csv

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from runs import selectors as run_selectors
from runs.durable.errors import DurableError

from . import ledger, selectors, services
from .forms import BudgetForm, DecisionForm, LedgerForm, QuotaForm
from .models import Budget, BudgetChange

CSV_FIELDS = ("key", "label", "calls", "prompt_tokens", "completion_tokens", "tokens", "cost")


def _back(request, fallback: str):
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                       require_https=request.is_secure()):
        return redirect(target)
    return redirect(fallback)


def _refuse(request, status: int, message: str, fallback: str):
    """Bad input (400; 422 to htmx, which swaps it in), a rule's no (403), a run or
    request that moved on (409): the message, nothing changed."""
    if request.htmx:
        status = 422 if status == 400 else status
        response = HttpResponse(render_to_string("budgets/_refusal.html", {"message": message},
                                                 request=request), status=status)
        response["HX-Retarget"] = "#budget-messages"
        response["HX-Reswap"] = "innerHTML"
        return response
    if status == 403:
        raise PermissionDenied(message)
    messages.error(request, message)
    return _back(request, fallback)


# --- the inbox -----------------------------------------------------------------------------
@login_required
@require_GET
def inbox(request):
    return render(request, "budgets/inbox.html", {"approvals": selectors.inbox(request.user)})


@login_required
@require_GET
def inbox_rows(request):
    """The inbox's list, polled by the page: new requests appear, answered ones go."""
    response = render(request, "budgets/_inbox_rows.html",
                      {"approvals": selectors.inbox(request.user)})
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def decide(request, approval_id: str, decision: str):
    row = selectors.approval_for_user(request.user, approval_id)  # 404 if not theirs to see
    fallback = row.run.get_absolute_url()
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _refuse(request, 400, "; ".join(e for errs in form.errors.values() for e in errs),
                       fallback)
    if not selectors.may_approve(request.user, row):
        raise PermissionDenied(f"This request is for {row.approvers} to answer.")
    try:
        row = services.decide_approval(approval_id=row.pk, user=request.user,
                                       approve=decision == "approve",
                                       reason=form.cleaned_data["reason"])
    except DurableError as exc:
        return _refuse(request, 409, str(exc), fallback)
    if request.htmx:
        return render(request, "budgets/_inbox_rows.html",
                      {"approvals": selectors.inbox(request.user),
                       "answered": row})
    messages.success(request, f"{row.tool}: {row.status}.")
    return _back(request, fallback)


# --- a run's budget ------------------------------------------------------------------------
@login_required
@require_POST
def run_budget(request, run_id: str):
    run = run_selectors.run_get_for_user(request.user, run_id)  # 404 if not theirs
    form = BudgetForm(request.POST)
    if not form.is_valid():
        return _refuse(request, 400, "; ".join(e for errs in form.errors.values() for e in errs),
                       run.get_absolute_url())
    try:
        services.set_run_budget(run_id=run.pk, user=request.user, budget=form.budget(),
                                reason=form.cleaned_data["reason"] or "budget changed")
    except PermissionDenied as exc:
        return _refuse(request, 403, str(exc), run.get_absolute_url())
    except DurableError as exc:
        return _refuse(request, 409, str(exc), run.get_absolute_url())
    if request.htmx:
        run.refresh_from_db()
        return HttpResponse(render_to_string("runs/panels/budget.html",
                                             {"run": run, "oob": True}, request=request))
    messages.success(request, "Budget changed.")
    return redirect(run)


# --- the ledger ----------------------------------------------------------------------------
def _ledger(request):
    form = LedgerForm(request.GET)
    group = form.cleaned_data.get("group") if form.is_valid() else ""
    runs = run_selectors.visible_runs(request.user)
    return form, group or "run", runs


@login_required
@require_GET
def costs(request):
    form, group, runs = _ledger(request)
    return render(request, "budgets/costs.html", {
        "form": form, "group": group, "rows": ledger.totals(runs, group),
        "total": ledger.grand_total(runs), "today": ledger.today(runs),
        "groups": [("run", "per run"), ("user", "per user"), ("agent", "per agent"),
                   ("day", "per day")]})


@login_required
@require_GET
def costs_csv(request):
    form, group, runs = _ledger(request)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="agentops-costs-per-{group}.csv"'
    writer = csv.writer(response)
    writer.writerow((group, *CSV_FIELDS[1:]))
    for row in ledger.totals(runs, group, limit=100_000):
        writer.writerow([_cell(row[field]) for field in CSV_FIELDS])
    return response


def _cell(value):
    if isinstance(value, float):
        return f"{value:.8f}"
    text = str(value)
    # a spreadsheet runs a cell that starts like a formula: a name must not
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


# --- operators: quotas ----------------------------------------------------------------------
@login_required
@permission_required("runs.operate_run", raise_exception=True)
@require_http_methods(["GET", "POST"])
def quotas(request):
    form = QuotaForm(request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            services.set_quota(user=request.user, scope=data["scope"], period=data["period"],
                               subject=data["subject_obj"], cost=form.budget() and
                               form.budget().get("cost"), tokens=form.budget() and
                               form.budget().get("tokens"), reason=data["reason"])
            messages.success(request, "Quota saved; runs waiting on it were queued again.")
            return redirect("budgets:quotas")
        status = 400
    else:
        status = 200
    held = run_selectors.visible_runs(request.user).filter(
        status="needs_attention", attention__kind="budget").order_by("-updated_at")[:100]
    return render(request, "budgets/quotas.html", {
        "form": form, "quotas": Budget.objects.select_related("user"),
        "changes": BudgetChange.objects.all()[:30], "held": held}, status=status)
