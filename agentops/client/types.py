"""What the API returns, as dataclasses (the fields of the OpenAPI document's schemas)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

FINAL_STATUSES = ("succeeded", "failed", "cancelled")


def _time(value):
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) \
        else value


class _FromDict:
    TIMES: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict):
        known = {f.name for f in fields(cls)}
        values = {k: (_time(v) if k in cls.TIMES else v) for k, v in data.items() if k in known}
        return cls(**values)


@dataclass(frozen=True)
class Agent(_FromDict):
    name: str
    version: str
    description: str
    input_schema: dict


@dataclass(frozen=True)
class Run(_FromDict):
    TIMES = ("created_at", "updated_at", "finished_at")
    id: str
    agent: str
    agent_version: str
    status: str
    owner: str | None
    branch: int
    step_no: int
    event_seq: int
    checkpoint_count: int
    control: str | None
    inputs: Any
    output: Any
    error: Any
    attention: Any
    progress: dict
    stall: dict | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    parent_id: str | None = None  # the run that spawned it (docs/children.md)

    @property
    def ended(self) -> bool:
        return self.status in FINAL_STATUSES


@dataclass(frozen=True)
class Message:
    """A chat message as sent: "delivered" (the run was waiting and took it) or "queued"
    (it takes it at its next wait); `run` as it was then."""

    id: int
    state: str
    text: str
    end: bool
    run: Run


@dataclass(frozen=True)
class RunPage:
    runs: list[Run]
    next_cursor: str | None


@dataclass(frozen=True)
class Event(_FromDict):
    TIMES = ("at",)
    seq: int
    kind: str
    data: Any
    at: datetime
    text: str = ""


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    head: int
    more: bool


@dataclass(frozen=True)
class Checkpoint(_FromDict):
    TIMES = ("created_at",)
    number: int
    branch: int
    step_no: int
    size: int
    reason: str
    parent_number: int | None
    created_at: datetime
    state: Any = None


@dataclass(frozen=True)
class Effect(_FromDict):
    TIMES = ("started_at", "finished_at")
    branch: int
    step_no: int
    seq: int
    kind: str
    tool: str
    key: str
    idempotent: bool
    status: str
    args_preview: str
    result: Any
    error: Any
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    resolution: str
    superseded: bool


@dataclass
class End:
    """How a followed run ended: its final status and its last event's number."""

    status: str
    seq: int
    extra: dict = field(default_factory=dict)
