"""Pieces of the run page fetched on demand: stale panels, a checkpoint's state,
older events, the output as a JSON file, and rows of the run list."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs import selectors
from runs.durable import records as r
from runs.web.views.panels import PANELS, render_panels
from runs.web.views.present import event_message, human_bytes, pretty_json
from runs.worker.stalls import mark_stalls


@login_required
@require_GET
def run_panels(request, run_id: str):
    """`?p=effects&p=timeline`: those panels, each marked hx-swap-oob."""
    run = selectors.run_get_for_user(request.user, run_id)
    names = [name for name in request.GET.getlist("p") if name in PANELS] or list(PANELS)
    response = HttpResponse(render_panels(request, run, dict.fromkeys(names), oob=True,
                                          input={"live": True}))
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def checkpoint_detail(request, run_id: str, number: int):
    run = selectors.run_get_for_user(request.user, run_id)
    checkpoint = selectors.checkpoint_get(run, number)
    state = selectors.checkpoint_state(checkpoint)
    if request.GET.get("download"):
        response = JsonResponse(state, safe=False, json_dumps_params={"indent": 2})
        response["Content-Disposition"] = (
            f'attachment; filename="run-{run.pk[:12]}-checkpoint-{number}.json"')
        return response
    text, truncated = pretty_json(state, 100_000)
    return render(request, "runs/_checkpoint.html", {
        "run": run, "checkpoint": checkpoint, "state_json": text, "truncated": truncated,
        "size": human_bytes(checkpoint.size)})


@login_required
@require_GET
def events_older(request, run_id: str):
    run = selectors.run_get_for_user(request.user, run_id)
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        return HttpResponseBadRequest("before must be an event number")
    events = selectors.events_before(run, before)
    return render(request, "runs/_events_older.html", {
        "run": run, "events": [event_message(e) for e in events],
        "first_seq": events[0].seq if events else before})


@login_required
@require_GET
def output_json(request, run_id: str):
    run = selectors.run_get_for_user(request.user, run_id)
    if run.status != r.SUCCEEDED:
        raise Http404("This run has no output yet.")
    body = json.dumps(run.output, indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk[:12]}-output.json"'
    return response


@login_required
@require_GET
def run_rows(request):
    """`?id=..&id=..`: fresh rows of the run list (after a live update said they moved)."""
    ids = request.GET.getlist("id")[:100]
    runs = mark_stalls(list(selectors.run_list(request.user).filter(pk__in=ids)))
    return render(request, "runs/_run_rows.html", {"runs": runs, "oob": True})
