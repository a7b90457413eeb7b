"""Full pages: my runs, launch, the run page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from runs import selectors, services
from runs.budgets.forms import LaunchBudgetForm
from runs.durable import AgentNotFoundError, DurableError, InputValidationError, registry
from runs.operator.selectors import keyset_page
from runs.web.forms import SchemaForm
from runs.web.views.panels import all_panels_context
from runs.web.views.present import STATUS_LABELS, event_message
from runs.worker.stalls import mark_stalls

PAGE_SIZE = 25
STATUS_CHIPS = [("", "All"), ("active", "Active"), ("waiting", "Waiting"),
                ("needs_attention", "Needs attention"), ("succeeded", "Succeeded"),
                ("failed", "Failed"), ("cancelled", "Cancelled")]


@login_required
def run_list(request):
    """Keyset pages, newest first, as the operators' list and the API page the same runs:
    no page count, which would count every run of the user (docs/scaling.md)."""
    status = request.GET.get("status", "")
    status = status if status in selectors.STATUS_FILTERS else ""
    agent = request.GET.get("agent", "")
    page = keyset_page(selectors.run_list(request.user, status=status, agent=agent),
                       after=request.GET.get("after"), before=request.GET.get("before"),
                       size=PAGE_SIZE)
    mark_stalls(page.runs)
    counts = selectors.run_status_counts(request.user, [value for value, _ in STATUS_CHIPS],
                                         selectors.CHIP_COUNT_CAP)
    context = {
        "page": page, "status": status, "agent": agent,
        "chips": [(value, label, chip_count(counts[value])) for value, label in STATUS_CHIPS],
        # the registry's agents, not those the user's runs name: finding those read every
        # run of the user; a filter on an agent no longer registered keeps its choice
        "agents": sorted(set(registry.names()) | ({agent} if agent else set())),
        "newest_id": selectors.newest_run_id(request.user),
        "filtered": bool(status or agent),
    }
    if request.htmx and request.htmx.target == "run-list":
        return render(request, "runs/_run_list.html", context)
    return render(request, "runs/list.html", context)


def chip_count(n: int) -> str:
    """A chip's count as counted up to the cap (selectors.run_status_counts)."""
    return f"{selectors.CHIP_COUNT_CAP:,}+" if n > selectors.CHIP_COUNT_CAP else str(n)


def _agent_cards() -> list[dict]:
    cards = []
    for name in registry.names():
        cls = registry.agents[name]
        props = (cls.input_schema or {}).get("properties", {})
        cards.append({"name": name, "version": cls.version,
                      "description": cls.description or "", "fields": list(props)})
    return cards


@login_required
@require_http_methods(["GET", "POST"])
def launch(request, agent: str | None = None):
    cards = _agent_cards()
    if agent is None:
        return render(request, "runs/launch.html", {"cards": cards, "agent": None})
    try:
        agent_cls = type(registry.get(agent))
    except AgentNotFoundError:
        raise Http404("No such agent.") from None
    form = SchemaForm(agent_cls.input_schema, data=request.POST or None)
    budget_form = LaunchBudgetForm.for_agent(agent_cls, request.POST or None)  # docs/budgets.md
    if request.method == "POST" and form.is_valid() and budget_form.is_valid():
        try:
            run = services.run_launch(user=request.user, agent=agent, inputs=form.inputs(),
                                      budget=budget_form.launch_budget())
        except InputValidationError as exc:
            form.add_engine_error(exc.field, str(exc))
        except DurableError as exc:
            form.add_error(None, str(exc))
        else:
            if request.htmx:
                response = render(request, "runs/_launched.html", {"run": run})
                response["HX-Redirect"] = run.get_absolute_url()
                return response
            return redirect(run)
    context = {"cards": cards, "agent": agent, "agent_cls": agent_cls, "form": form,
               "budget_form": budget_form}
    status = 422 if request.method == "POST" else 200
    if request.htmx and request.htmx.target == "launch-panel":
        return render(request, "runs/_launch_form.html", context, status=status)
    return render(request, "runs/launch.html", context, status=status)


@login_required
def run_detail(request, run_id: str):
    run = selectors.run_get_for_user(request.user, run_id)
    mark_stalls([run])
    events = selectors.events_tail(run)
    context = {
        "run": run,
        "events": [event_message(e) for e in events],
        "first_seq": events[0].seq if events else 1,
        "last_seq": run.event_seq,
        "progress_samples": selectors.progress_samples(run),
        "status_labels": STATUS_LABELS,
        "oob": False,
        **all_panels_context(run),
    }
    if context["is_chat"]:  # what is being streamed now: run.js applies it as live events
        context["stream_events"] = [e.as_message() for e in
                                    selectors.run_stream_events(run, upto=run.event_seq)]
    return render(request, "runs/detail.html", context)
