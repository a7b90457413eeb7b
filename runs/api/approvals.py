"""Approvals over the API: the requests the caller may answer, one request, and the
answer (docs/approvals.md). The rules and the write are the inbox's and the run page's:
runs/budgets/selectors.py says who may see and answer a request, and
runs/budgets/services.decide_approval records an answer in time or not at all (after
the deadline: 409, nothing recorded, the fallback applies)."""

from __future__ import annotations

from ninja import Router
from ninja.errors import HttpError

from runs.api import schemas as s
from runs.api.auth import need
from runs.api.endpoints import READ, WRITE
from runs.api.present import approval_out
from runs.budgets import selectors, services
from runs.budgets.models import Approval
from runs.web.untrusted import is_run_id

router = Router()  # mounted by runs/api/api.py


def approval_for(request, approval_id: str) -> Approval:
    """The request if the caller may see it (the inbox's rule), else 404."""
    need(request, "read")
    if not is_run_id(approval_id):  # the book mints ids as run ids are minted
        raise HttpError(404, "No such approval.")
    return selectors.approval_for_user(request.auth, approval_id)


@router.get("/approvals", response={200: list[s.ApprovalOut], **READ}, tags=["approvals"],
            summary="The pending requests you may answer, oldest first (past their deadline: "
                    "not listed)")
def list_approvals(request):
    need(request, "read")
    return [approval_out(row) for row in selectors.inbox(request.auth)]


@router.get("/approvals/{approval_id}", response={200: s.ApprovalOut, **READ},
            tags=["approvals"], summary="One approval request")
def get_approval(request, approval_id: str):
    return approval_out(approval_for(request, approval_id))


def decide(request, approval_id: str, body: s.DecisionIn, *, approve: bool) -> dict:
    row = approval_for(request, approval_id)
    # the owner answers for their own run ('launch'); operators and groups act as such
    need(request, "launch" if row.approvers == "owner" else "operate")
    if not selectors.may_approve(request.auth, row):
        raise HttpError(403, f"this request is for {row.approvers} to answer")
    return approval_out(services.decide_approval(approval_id=row.pk, user=request.auth,
                                                 approve=approve, reason=body.reason))


@router.post("/approvals/{approval_id}/approve", response={200: s.ApprovalOut, **WRITE},
             tags=["approvals"], summary="Approve the call: it is made once (409 if answered "
                                         "already or past the deadline)")
def approve(request, approval_id: str, body: s.DecisionIn):
    return decide(request, approval_id, body, approve=True)


@router.post("/approvals/{approval_id}/deny", response={200: s.ApprovalOut, **WRITE},
             tags=["approvals"], summary="Deny the call: the agent sees ApprovalDeniedError (409 "
                                         "if answered already or past the deadline)")
def deny(request, approval_id: str, body: s.DecisionIn):
    return decide(request, approval_id, body, approve=False)
