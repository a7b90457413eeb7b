"""The operators' actions over the API: pause, resume, rollback (and its preview), a
state edit, the answer to an in-doubt effect. Operators only (runs.operate_run, the
pages' rule) through a session or an 'operate' token; each takes a reason for the
audit trail and calls the same service as the operator pages."""

from __future__ import annotations

from ninja import Query, Router
from ninja.errors import HttpError

from runs import selectors, services
from runs.api import schemas as s
from runs.api.auth import need_operator
from runs.api.endpoints import READ, WRITE, _check_run_id
from runs.api.present import run_out
from runs.api.validate import reason_of, resolve_of, rollback_of
from runs.models import Run

router = Router()  # mounted by runs/api/api.py


def operated(request, run_id: str) -> Run:
    _check_run_id(run_id)
    need_operator(request)
    return selectors.run_get_for_user(request.auth, run_id)


@router.post("/runs/{run_id}/pause", response={200: s.RunOut, **WRITE}, tags=["operate"],
             summary="Pause at the next effect boundary (operators)")
def pause(request, run_id: str, body: s.ReasonIn):
    run = operated(request, run_id)
    reason = reason_of(body.reason)
    return run_out(services.run_pause(run_id=run.pk, user=request.auth, reason=reason))


@router.post("/runs/{run_id}/resume", response={200: s.RunOut, **WRITE}, tags=["operate"],
             summary="Resume a paused run, retry a failed one, continue one that needs "
                     "attention (operators)")
def resume(request, run_id: str, body: s.ResumeIn):
    run = operated(request, run_id)
    reason = reason_of(body.reason)
    return run_out(services.run_resume(run_id=run.pk, user=request.auth, reason=reason,
                                       upgrade=body.upgrade))


@router.get("/runs/{run_id}/rollback", response={200: s.RollbackPreview, **READ},
            tags=["operate"], summary="What a rollback to a checkpoint would undo (operators)")
def rollback_preview(request, run_id: str, checkpoint: int = Query(..., ge=1, le=2**31 - 1)):
    run = operated(request, run_id)
    return services.run_rollback_preview(run_id=run.pk, checkpoint=checkpoint)


@router.post("/runs/{run_id}/rollback", response={200: s.RunOut, **WRITE}, tags=["operate"],
             summary="Roll back to a checkpoint: a new branch with new idempotency keys "
                     "(operators)")
def rollback(request, run_id: str, body: s.RollbackIn):
    run = operated(request, run_id)
    data = rollback_of(body.checkpoint, body.reason, body.then)
    resume = (data["then"] == "resume") if body.then else None
    return run_out(services.run_rollback(run_id=run.pk, checkpoint=data["checkpoint"],
                                         user=request.auth, reason=data["reason"],
                                         resume=resume, children=body.children))


@router.post("/runs/{run_id}/state", response={200: s.RunOut, **WRITE}, tags=["operate"],
             summary="Edit the state by a JSON Patch: a new checkpoint on a new branch, the "
                     "run left paused (operators)")
def edit_state(request, run_id: str, body: s.EditStateIn):
    run = operated(request, run_id)
    reason = reason_of(body.reason)
    return run_out(services.run_patch_state(run_id=run.pk, patch=body.patch, user=request.auth,
                                            reason=reason, checkpoint=body.checkpoint))


@router.post("/runs/{run_id}/effects/{seq}/resolve", response={200: s.RunOut, **WRITE},
             tags=["operate"], summary="Answer an in-doubt effect: done, retry or skip "
                                       "(operators)")
def resolve(request, run_id: str, seq: int, body: s.ResolveIn):
    run = operated(request, run_id)
    if not 0 <= seq < 2**31:
        raise HttpError(404, "No such effect.")
    data = resolve_of(seq, body.resolution, body.result, body.reason)
    return run_out(services.run_resolve_effect(
        run_id=run.pk, seq=data["seq"], resolution=data["resolution"], result=data["result"],
        user=request.auth, reason=data["reason"]))
