"""What the API takes and gives, as the OpenAPI document shows it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

RUN_ID = r"^[0-9A-Za-z_-]{1,32}$"
JSON = Any  # any JSON value (the body parser refuses what is not: runs/api/parsing.py)


class Error(Schema):
    detail: str
    errors: list[dict] | None = None


class AgentOut(Schema):
    name: str
    version: str
    description: str
    input_schema: dict


class Progress(Schema):
    done: float
    total: float
    message: str
    percent: float


class Stall(Schema):
    kind: str
    since: datetime | str | None = None
    why: str = ""


class RunOut(Schema):
    id: str
    agent: str
    agent_version: str
    status: str
    owner: str | None
    branch: int
    step_no: int
    event_seq: int = Field(description="the number of the run's last event")
    checkpoint_count: int
    control: str | None
    inputs: JSON
    output: JSON
    error: JSON
    attention: JSON
    progress: Progress
    stall: dict | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    parent_id: str | None = Field(None, description="the run that spawned this one, if any "
                                                    "(docs/children.md)")
    code_fingerprint: str = Field("", description="its agent's code (docs/deploys.md)")
    version_wait: str | None = Field(None, description="why it waits for a worker of its own "
                                                       "code, if it does (docs/deploys.md)")


class RunPage(Schema):
    runs: list[RunOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class LaunchIn(Schema):
    agent: str = Field(max_length=100)
    inputs: JSON = Field(default_factory=dict, description="checked against the agent's "
                                                           "input schema")


class CancelIn(Schema):
    reason: str = Field("", max_length=2000)


class AnswerIn(Schema):
    value: JSON = Field(description="the answer, checked against the question's schema")


class ReasonIn(Schema):
    reason: str = Field(max_length=2000, description="required: it goes into the audit trail")


class ResumeIn(ReasonIn):
    upgrade: bool = Field(False, description="continue on the agent's current version")


class RollbackIn(ReasonIn):
    checkpoint: int = Field(ge=1, le=2**31 - 1)
    then: Literal["resume", "pause"] | None = Field(
        None, description="resume at once or stay paused (default: paused if it was)")
    children: Literal["cancel", "keep"] = Field(
        "cancel", description="the child runs launched by the spawns it undoes: cancel those "
                              "not ended, or keep them (docs/children.md)")


class EditStateIn(ReasonIn):
    patch: list[dict] = Field(min_length=1, description="a JSON Patch (RFC 6902) on the state "
                                                        "of the latest checkpoint")
    checkpoint: int | None = Field(None, ge=1, le=2**31 - 1,
                                   description="the checkpoint the patch was made on: refused "
                                               "(409) if it is no longer the latest")


class ResolveIn(ReasonIn):
    resolution: Literal["done", "retry", "skip"]
    result: JSON = None


class ApprovalOut(Schema):
    id: str
    run_id: str
    tool: str
    arguments: JSON = Field(description="the call's arguments by name")
    args_preview: str
    approvers: str = Field(description="owner, operators or group:<name>")
    status: Literal["pending", "approved", "denied", "expired"]
    requested_at: datetime
    deadline: datetime | None = Field(description="an answer at or after it is refused "
                                                  "(409); none: it waits for an answer")
    decided_by: str
    decided_at: datetime | None
    reason: str
    fallback: str = Field(description="what the call becomes if unanswered by the deadline")


class DecisionIn(Schema):
    reason: str = Field("", max_length=2000, description="optional: it goes into the audit "
                                                         "trail")


class EventOut(Schema):
    seq: int
    kind: str
    data: JSON
    at: datetime
    text: str


class EventPage(Schema):
    events: list[EventOut]
    head: int = Field(description="the run's last event number when read")
    more: bool = Field(description="more events follow the last one here: ask again with "
                                   "after= its seq")
    pruned_before: int = Field(0, description="retention deleted the run's events numbered "
                                              "below this, but its status events "
                                              "(docs/retention.md); 0: none")


class CheckpointOut(Schema):
    number: int
    branch: int
    step_no: int
    size: int
    reason: str
    parent_number: int | None
    created_at: datetime


class CheckpointState(CheckpointOut):
    state: JSON


class EffectOut(Schema):
    branch: int
    step_no: int
    seq: int
    kind: str
    tool: str
    key: str
    idempotent: bool
    status: str
    args_preview: str
    result: JSON
    error: JSON
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    resolution: str
    superseded: bool
    carried: bool = Field(False, description="carried over by an upgrade and not asked for "
                                             "again yet: its seq is negative until then")


class EffectPage(Schema):
    effects: list[EffectOut]
    total: int


class RollbackPreview(Schema):
    checkpoint: int
    step: int
    branch: int
    steps_undone: int
    stays_paused: bool
    by_tool: list[dict]
    not_idempotent: int
    reached: int
    effects: list[dict]
    children: list[dict] = Field(default_factory=list,
                                 description="the child runs its undone spawns launched")


class TokenInfo(Schema):
    name: str
    scopes: list[str]
    expires_at: datetime | None
    user: str
