"""Deploys over the API (operators only, an 'operate' token; docs/deploys.md): the replay
check of recorded histories against this server's code, and the bulk upgrade with its
preview. The same functions as `manage.py runs replay-check` and the Deploys page."""

from __future__ import annotations

from typing import Literal

from ninja import Field, Router, Schema
from ninja.errors import HttpError

from runs.api.auth import need_operator
from runs.api.endpoints import WRITE
from runs.api.validate import reason_of
from runs.deploys import replay_check, services
from runs.deploys.selectors import REPLAY_CHECK_LIMIT
from runs.durable.records import STATUSES
from runs.web.untrusted import is_run_id

router = Router()  # mounted by runs/api/api.py

MAX_REPLAY_CHECK = 1000
Status = Literal[STATUSES]


class ReplayCheckIn(Schema):
    agent: str = Field("", max_length=100, description="only the runs of this agent")
    status: list[Status] = Field(default_factory=list, max_length=len(STATUSES),
                                 description="only runs with these statuses")
    limit: int = Field(REPLAY_CHECK_LIMIT, ge=1, le=MAX_REPLAY_CHECK,
                       description="runs not ended first, then the newest ended ones")


class ReplayCheckOut(Schema):
    passed: bool = Field(description="false if a run not ended would not move to this code")
    checked: int
    clean: int
    diverging: int
    diverging_in_flight: int
    unknown_agent: int
    later: int
    errors: int
    blocking: list[str] = Field(description="the runs not ended that fail the check")
    summary: str
    runs: list[dict] = Field(description="each run's verdict: clean, diverges, "
                                         "unknown_agent, later or error, with its message")


class UpgradesIn(Schema):
    run_ids: list[str] = Field(min_length=1, description=f"at most {services.MAX_RUNS}")
    reason: str = Field("", max_length=2000, description="required unless preview: it goes "
                                                         "into each run's audit trail")
    preview: bool = Field(False, description="only say what the upgrade would do")


@router.post("/replay-check", response={200: ReplayCheckOut, **WRITE}, tags=["deploys"],
             summary="Replay recorded histories on this server's agent code, with no side "
                     "effect (operators)")
def replay_check_runs(request, body: ReplayCheckIn):
    need_operator(request)
    return replay_check.replay_check(agent=body.agent, statuses=body.status,
                                     limit=body.limit).as_dict()


@router.post("/upgrades", response={200: dict, **WRITE}, tags=["deploys"],
             summary="Upgrade runs to this server's agent code, or preview it (operators)")
def upgrades(request, body: UpgradesIn):
    need_operator(request)
    if len(body.run_ids) > services.MAX_RUNS:
        raise HttpError(400, f"run_ids: at most {services.MAX_RUNS} runs per request, not "
                             f"{len(body.run_ids)}: send them in batches")
    bad = next((run_id for run_id in body.run_ids if not is_run_id(run_id)), None)
    if bad is not None:
        raise HttpError(422, f"run_ids: {bad[:40]!r} is not a run id (1-32 letters, digits, "
                             "'-' or '_')")
    try:
        if body.preview:
            return services.upgrade_preview(run_ids=body.run_ids)
        reason = reason_of(body.reason)
        return services.upgrade_runs(run_ids=body.run_ids, user=request.auth, reason=reason)
    except services.UnknownRunsError as exc:
        raise HttpError(422, str(exc)) from None
