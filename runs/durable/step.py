"""One step's place in the log: the positions its effects take, in the order they are
asked for, and the records made at them.

This is the internal side of a RunContext (runs/durable/context.py): what the call path
(calls.py, attempts.py), parallel calls (parallel.py) and child runs (children.py) use,
so that none of them reaches into the context. A position is (branch, step, seq); what
the log holds there comes from the host's ReplayState (runs/durable/replay.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import records as r
from .gatekeeper import CallGates
from .serde import digest, preview

if TYPE_CHECKING:  # pragma: no cover
    from .host import StepHost
    from .registry import Tool

Position = tuple[int, int, int]


def idempotency_key(run_id: str, branch: int, step_no: int, seq: int) -> str:
    return f"{run_id}:{branch}:{step_no}:{seq}"


class Step:
    """One step of a run on `host`. `live`: on_resume's step, whose effects are fresh every
    time (never replayed, so never held by a gate nor waiting durably)."""

    def __init__(self, host: StepHost, step_no: int, *, live: bool = False):
        self.host = host
        self.replay = host.replay
        self.step_no = step_no
        self.live = live
        self._seq = 0

    @property
    def run_id(self) -> str:
        return self.host.run.id

    @property
    def branch(self) -> int:
        return self.host.run.branch

    def here(self) -> Position:
        """The position the next effect takes (not taken yet)."""
        return (self.branch, self.step_no, self._seq)

    def advance(self) -> None:
        """The position `here()` is taken (a patch marker found or recorded there)."""
        self._seq += 1

    def next(self, kind: str, name: str, args, kwargs) -> tuple[Position, r.EffectRecord | None]:
        """Take the next position: it, and what the log holds there for this same call
        (None: nothing, the effect is new). Raises the replay's halt again (the agent
        caught it and went on) or NonDeterminismError (another call was logged there)."""
        self.replay.raise_if_halted()
        position = self.here()
        self.advance()
        if self.live:
            return position, None
        recorded = self.replay.take(position, kind, name, args, kwargs)
        if recorded is not None and recorded.moved_from is not None:
            # A carried effect taken over here: written at this position with the next
            # commit, under its own key (a crash before then takes it over again).
            self.host.buffer_record(recorded)
        return position, recorded

    def new_record(self, position: Position, kind: str, tool: Tool | None, args,
                   kwargs) -> r.EffectRecord:
        """The intent of a new effect at `position`, keyed by it."""
        branch, step_no, seq = position
        name = tool.name if tool is not None else kind
        if kind in (r.SLEEP, r.INPUT):
            name = "sleep" if kind == r.SLEEP else "input"
        return r.EffectRecord(
            branch=branch, step_no=step_no, seq=seq, kind=kind, tool=name,
            digest=digest(name, args, kwargs),
            key=idempotency_key(self.run_id, branch, step_no, seq),
            idempotent=bool(tool and tool.idempotent), status=r.INTENT,
            args_preview=preview(args, kwargs), worker=self.host.owner, unwritten=True,
        )

    def gates(self, tool: Tool, record: r.EffectRecord, args, kwargs) -> CallGates:
        """The host's gates about this call (runs/durable/gatekeeper.py)."""
        return CallGates(self.host, tool, record, args, kwargs)

    def tag(self, tool: Tool) -> str:
        """agent/tool: what a named fault point matches (runs/durable/faults.py)."""
        return f"{self.host.run.agent}/{tool.name}"
