"""Agents, runs, their events, checkpoints and effects; a user's launch, cancel and
answer. Reads go through runs/selectors.py (another user's run is a 404, as on the
pages), writes through runs/services.py."""

from __future__ import annotations

from django.db import IntegrityError
from django.http import HttpResponse
from ninja import Header, Query, Router, Status
from ninja.errors import HttpError

from runs import selectors, services
from runs.api import idempotency
from runs.api import schemas as s
from runs.api.auth import need, need_operator
from runs.api.present import checkpoint_out, effect_out, event_out, run_out, runs_out
from runs.api.validate import reason_of
from runs.durable import AgentNotFoundError, DurableError, registry
from runs.models import Run
from runs.operator import selectors as ops_selectors

router = Router()  # mounted by runs/api/api.py

READ = {400: s.Error, 401: s.Error, 403: s.Error, 404: s.Error, 422: s.Error, 503: s.Error}
WRITE = {**READ, 409: s.Error, 413: s.Error, 415: s.Error}  # a body: too large, not JSON
RunId = s.RUN_ID
MAX_PAGE = 200


def run_for(request, run_id: str) -> Run:
    """The run if the caller may see it (selectors' rule), else 404."""
    need(request, "read")
    return selectors.run_get_for_user(request.auth, run_id)


def _check_run_id(run_id: str) -> None:
    # the path converter takes any segment; a run id is 1-32 letters, digits, - or _
    from runs.web.untrusted import is_run_id

    if not is_run_id(run_id):
        raise HttpError(404, "No such run.")


# --- agents -------------------------------------------------------------------------------
def _agent(name: str) -> dict:
    cls = type(registry.get(name))
    return {"name": name, "version": str(cls.version), "description": cls.description or "",
            "input_schema": cls.input_schema or {}}


@router.get("/agents", response={200: list[s.AgentOut], **READ}, tags=["agents"],
            summary="The agents one can launch, with their input schemas")
def list_agents(request):
    need(request, "read")
    return [_agent(name) for name in registry.names()]


@router.get("/agents/{name}", response={200: s.AgentOut, **READ}, tags=["agents"],
            summary="One agent and its input schema")
def get_agent(request, name: str):
    need(request, "read")
    try:
        return _agent(name)
    except AgentNotFoundError:
        raise HttpError(404, "No such agent.") from None


# --- runs ------------------------------------------------------------------------------
@router.post("/runs", response={202: s.RunOut, **WRITE}, tags=["runs"],
             summary="Launch a run (202 and the run; idempotent under Idempotency-Key)")
def launch(request, response: HttpResponse, body: s.LaunchIn,
           idempotency_key: str | None = Header(None, alias="Idempotency-Key",
                                                max_length=255)):
    need(request, "launch")
    user = request.auth
    if idempotency_key is None:
        run = services.run_launch(user=user, agent=body.agent, inputs=body.inputs)
        return _launched(response, run)
    try:
        claim = idempotency.claim(user, idempotency_key,
                                  idempotency.request_digest(body.agent, body.inputs))
    except idempotency.KeyError_ as exc:
        raise HttpError(exc.status, str(exc)) from None
    if not claim.replay:
        try:
            run = services.run_launch(user=user, agent=body.agent, inputs=body.inputs,
                                      run_id=claim.run_id)
        except IntegrityError:  # the same key and body, launched by a request in parallel
            pass
        except DurableError:
            idempotency.forget(user, idempotency_key, claim.run_id)
            raise
        else:
            return _launched(response, run)
    response["Idempotent-Replayed"] = "true"
    return _launched(response, Run.objects.select_related("owner").get(pk=claim.run_id))


def _launched(response, run: Run):
    response["Location"] = f"/api/v1/runs/{run.pk}"
    return Status(202, run_out(run))


@router.get("/runs", response={200: s.RunPage, **READ}, tags=["runs"],
            summary="Runs, newest first: your own, or (operators, all=true) everyone's")
def list_runs(request,
              status: str = Query("", max_length=20,
                                  description="a status, or 'active' (not ended)"),
              agent: str = Query("", max_length=100),
              owner: str = Query("", max_length=150, description="operators, with all=true"),
              all: bool = Query(False, description="every user's runs (operators only)"),
              parent: str = Query("", max_length=32,
                                  description="only the child runs of this run "
                                              "(docs/children.md)"),
              cursor: str = Query("", max_length=400),
              limit: int = Query(50, ge=1, le=MAX_PAGE)):
    need(request, "read")
    user = request.auth
    if cursor and ops_selectors.decode_cursor(cursor) is None:
        # a damaged cursor is an error, never the first page again (a client would page
        # forever)
        raise HttpError(400, "cursor: not a cursor this API gave (pass next_cursor as it "
                             "came, or no cursor for the first page)")
    if status and status not in selectors.STATUS_FILTERS:
        raise HttpError(422, f"status: one of {', '.join(selectors.STATUS_FILTERS)}")
    if all or owner:
        if not selectors.can_see_all(user):
            raise HttpError(403, "only operators list every user's runs")
        filters = {"agent": agent, "owner": owner}
        # every field, unlike the all-runs page: run_out returns inputs, output and
        # error, and a deferred field is a query per run
        runs = ops_selectors.filtered_runs({k: v for k, v in filters.items() if v}).defer(None)
        if status:
            runs = runs.filter(status__in=selectors.STATUS_FILTERS[status])
    else:
        runs = selectors.run_list(user, status=status, agent=agent).select_related("owner")
    if parent:
        runs = runs.filter(parent_id=parent)
    page = ops_selectors.keyset_page(runs, "-created", after=cursor or None, size=limit)
    return {"runs": runs_out(page.runs), "next_cursor": page.next_cursor}


@router.get("/runs/{run_id}", response={200: s.RunOut, **READ}, tags=["runs"],
            summary="One run")
def get_run(request, run_id: str):
    _check_run_id(run_id)
    return run_out(run_for(request, run_id))


@router.post("/runs/{run_id}/cancel", response={200: s.RunOut, **WRITE}, tags=["runs"],
             summary="Cancel your run (operators: any run, with a reason)")
def cancel(request, run_id: str, body: s.CancelIn):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    if selectors.owns(request.auth, run):
        need(request, "launch")
        reason = body.reason.strip() or "cancelled by owner"
    else:
        need_operator(request)
        reason = reason_of(body.reason)
    return run_out(services.run_cancel(run_id=run.pk, user=request.auth, reason=reason))


@router.post("/runs/{run_id}/input", response={200: s.RunOut, **WRITE}, tags=["runs"],
             summary="Answer the question a run waits on (its owner)")
def answer(request, run_id: str, body: s.AnswerIn):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    need(request, "launch")
    if not selectors.owns(request.auth, run):
        raise HttpError(403, "only the run's owner can answer it")
    return run_out(services.run_provide_input(run_id=run.pk, value=body.value,
                                              user=request.auth))


# --- events, checkpoints, effects ---------------------------------------------------------
@router.get("/runs/{run_id}/events", response={200: s.EventPage, **READ}, tags=["events"],
            summary="The run's events after number N, in order, a page at a time")
def events(request, run_id: str, after: int = Query(0, ge=0, le=2**62),
           limit: int = Query(selectors.EVENT_BATCH, ge=1, le=selectors.EVENT_BATCH)):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    found = selectors.events_after(run.pk, after, limit=limit, upto=run.event_seq)
    last = found[-1].seq if found else after
    # Retention leaves gaps (docs/retention.md): a short page is the last one, whatever
    # its last number, since every event up to head committed with the run row read.
    return {"events": [event_out(e) for e in found], "head": run.event_seq,
            "more": len(found) == limit and last < run.event_seq,
            "pruned_before": run.events_pruned_before}


@router.get("/runs/{run_id}/checkpoints", response={200: list[s.CheckpointOut], **READ},
            tags=["checkpoints"], summary="The latest checkpoints, oldest first (no state)")
def checkpoints(request, run_id: str,
                limit: int = Query(100, ge=1, le=selectors.TIMELINE_CHECKPOINTS)):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    return [checkpoint_out(c) for c in selectors.run_checkpoints(run, limit=limit)]


@router.get("/runs/{run_id}/checkpoints/{number}", response={200: s.CheckpointState, **READ},
            tags=["checkpoints"], summary="One checkpoint with its state")
def checkpoint(request, run_id: str, number: int):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    if not 0 <= number < 2**31:
        raise HttpError(404, "No such checkpoint.")
    found = selectors.checkpoint_get(run, number)
    return {**checkpoint_out(found), "state": selectors.checkpoint_state(found)}


@router.get("/runs/{run_id}/effects", response={200: s.EffectPage, **READ}, tags=["effects"],
            summary="The latest effects (calls, sleeps, inputs), newest first")
def effects(request, run_id: str,
            limit: int = Query(selectors.EFFECTS_SHOWN, ge=1, le=selectors.EFFECTS_SHOWN)):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    shown, total = selectors.run_effects(run, limit=limit)
    return {"effects": [effect_out(e) for e in shown], "total": total}
