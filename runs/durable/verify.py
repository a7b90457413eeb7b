"""A run's recorded history replayed on an agent's code, with no side effect.

What a deploy asks before it moves a run to new code (runs/durable/upgrade.py) and what
`manage.py runs replay-check` asks of the code on disk: does this code, given the
run's inputs and the results the log holds, ask for every logged effect again, in the
same order, with the same arguments? The answer is a Verdict: clean, or the first
divergence ("diverges at step 12, call 3 (fetch_page args differ)").

The replay covers the run's live branch. It starts from the branch's first
checkpoint (the agent's `start` for a branch that began at the launch; the recorded
state of one forked by a rollback, an edit or an upgrade) and runs every step on the
new code, each call answered from the log (Temporal's replayer, on our checkpoints).
A state that no step made, an `on_resume`'s or an upgrade's, is taken as recorded
where its checkpoint stands. The replay ends at the end of the history: where the
code asks for something the log does not hold and nothing is logged after it (the
run's next new work), or where the run ended. Nothing is written and no tool is ever
called: the session below stops the step at the first new effect.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from . import observe, serde
from . import records as r
from .config import WorkerConfig
from .context import RunContext
from .errors import InDoubtEffectError, NonDeterminismError, Stop, StoreFailure, Suspend
from .registry import Agent, Done
from .replay import ReplayState

# Checkpoint reasons whose state a step made: a replay computes those states itself.
# Any other (an on_resume's, a rollback's, an edit's, an upgrade's) is taken as recorded.
STEP_REASONS = frozenset({"start", "step", "slice", "shutdown", "pause", "cancel", "wait"})


def replayed_from(branch_checkpoints) -> list[r.CheckpointRecord]:
    """The checkpoints of a branch whose state a replay takes as recorded: the first,
    and those no step made. What a store returns for HistoryQuery(replay=branch), with
    the bases of their patches."""
    ordered = sorted(branch_checkpoints, key=lambda c: (c.step_no, c.number))
    return ordered[:1] + [c for c in ordered[1:] if c.reason not in STEP_REASONS]


@dataclass(frozen=True)
class Divergence:
    """Where the new code first departs from the history: step and call (seq) there."""

    step_no: int
    seq: int
    why: str
    recorded: dict | None = None
    attempted: dict | None = None

    def describe(self) -> str:
        return f"diverges at step {self.step_no}, call {self.seq + 1} ({self.why})"

    def as_dict(self) -> dict:
        return {"step_no": self.step_no, "seq": self.seq, "why": self.why,
                "recorded": self.recorded, "attempted": self.attempted,
                "message": self.describe()}


@dataclass
class Verdict:
    """What replaying a history found. `state` is the new code's state after `state_step`
    steps (the run's latest checkpoint) when the replay got there before any divergence."""

    clean: bool
    divergence: Divergence | None = None
    steps: int = 0             # steps replayed
    asked: int = 0             # logged effects the code asked for again
    logged: int = 0            # live effects of the branch (what a clean replay keeps)
    state: Any = None
    state_step: int = 0
    reached: bool = False      # the replay reached `state_step` before diverging
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"clean": self.clean, "steps": self.steps, "asked": self.asked,
                "logged": self.logged, "seconds": round(self.seconds, 4),
                "divergence": self.divergence.as_dict() if self.divergence else None}


class ReachedNewWork(BaseException):
    """The code asked for an effect the log does not hold: the replay stops here.
    A BaseException, so that an agent's `except Exception` cannot swallow it."""


class VerifySession:
    """A StepHost (runs/durable/host.py) for a replay that writes nothing: every boundary
    before a new effect stops the step (ReachedNewWork), every write is dropped, and no
    gate is asked."""

    observed = observe.NOOP_SESSION
    suspended_for = 0.0
    epoch = 0
    owner = "replay-check"
    config = WorkerConfig(owner=owner, gates=())
    control = None

    def __init__(self, run: r.RunRecord, replay: ReplayState, store, registry):
        self.run, self.replay, self.store, self.registry = run, replay, store, registry
        self._recorded_keys: set[str] = set()

    def effect_boundary(self, *, settles: bool = False) -> None:
        raise ReachedNewWork()

    def ensure_lease(self) -> None:
        raise ReachedNewWork()  # right before a tool would be called: never

    def settles_cancel(self) -> bool:
        return False

    def log_effect(self, record: r.EffectRecord, *, usage: dict | None = None) -> None:
        self._written(record)

    def buffer_record(self, record: r.EffectRecord) -> None:
        self._written(record)

    def _written(self, record: r.EffectRecord) -> None:
        if record.key not in self._recorded_keys:
            raise ReachedNewWork()  # a new now(), random() or patch marker

    def emit(self, event) -> None:
        pass

    def set_progress(self, done, total, message: str) -> None:
        pass

    def write_events(self, written) -> None:
        pass

    def recorded(self, effects) -> None:
        self._recorded_keys = {e.key for e in effects}


def replay_history(run: r.RunRecord, agent: Agent, history: r.History, *,
                   store=None, registry=None) -> Verdict:
    """Replay the live branch of `run` (as `history` = HistoryQuery(replay=branch) holds
    it) on `agent`'s code."""
    started = time.perf_counter()
    verdict = _Replay(run, agent, history, store, registry).replay_all()
    verdict.seconds = time.perf_counter() - started
    return verdict


class _Replay:
    def __init__(self, run, agent, history, store, registry):
        self.run, self.agent = run, agent
        branch = run.branch
        self.checkpoints = sorted((c for c in history.checkpoints if c.branch == branch),
                                  key=lambda c: (c.step_no, c.number))
        self.all_checkpoints = history.checkpoints
        first = self.checkpoints[0] if self.checkpoints else None
        after = first.step_no if first else 0
        self.effects = [e for e in history.effects if e.branch == branch and not e.carried
                        and e.step_no > after and not e.superseded]
        self.replay = ReplayState(self.effects)
        self.session = VerifySession(run, self.replay, store, registry)
        self.session.recorded(self.effects)
        self.first = first
        self.verdict = Verdict(clean=True, logged=len(self.effects), state_step=run.step_no)

    def replay_all(self) -> Verdict:
        if self.first is None:
            return self.verdict  # never started: nothing was recorded
        step = self.first.step_no
        state = self._first_state()
        if isinstance(state, Divergence):
            return self._diverged(state)
        adopted = {c.step_no: c for c in self.checkpoints[1:] if c.reason not in STEP_REASONS}
        while True:
            if step in adopted:
                state = self._recorded_state(adopted[step])
            if step == self.run.step_no:
                self.verdict.state, self.verdict.reached = _copy(state), True
            if not self.replay.replaying and step >= self.run.step_no:
                return self.verdict
            outcome = self._step(step + 1, state)
            if isinstance(outcome, Divergence):
                return self._diverged(outcome)
            if outcome is _END:
                return self.verdict
            self.verdict.steps += 1
            step += 1
            self.replay.checkpointed(step)
            if isinstance(outcome, Done):
                return self._done_at(step)
            state = outcome

    def _first_state(self):
        first = self.first
        if first.reason == "start" and first.parent_number is None:
            try:
                return self.agent.start(dict(self.run.inputs))
            except Exception as exc:  # noqa: BLE001 - the new code's own failure
                return Divergence(0, 0, f"start() raises {type(exc).__name__}: {exc}"[:300])
        return self._recorded_state(first)

    def _recorded_state(self, checkpoint: r.CheckpointRecord):
        return serde.checkpoint_state(checkpoint, self.all_checkpoints)

    def _step(self, step_no: int, state):
        """The step's new state, Done, _END (the history ends inside it) or a Divergence."""
        ctx = RunContext(self.session, step_no)
        pending = self.replay.pending()
        try:
            result = self.agent.step(ctx, state)
            self.replay.raise_if_halted()
        except (ReachedNewWork, StoreFailure):  # a read of children is new work too
            return self._new_work()
        except NonDeterminismError as exc:
            return _differs(exc)
        except (InDoubtEffectError, Suspend, Stop) as exc:
            # The call in flight, a wait or a stop: the history's end, if nothing follows.
            return _END if not self._goes_on() else self._at_last(f"stops ({type(exc).__name__}) "
                                                                  "where the history goes on")
        except Exception as exc:  # noqa: BLE001 - the new code's own failure
            if not self._goes_on():
                return _END  # where the history ends: the run would fail there, as code can
            return self._at_last(f"raises {type(exc).__name__}: {exc}"[:300])
        finally:
            self.verdict.asked += pending - self.replay.pending()
        left = self.replay.left_in_step(self.run.branch, step_no)
        if left:
            missing = left[0]
            return Divergence(step_no, missing.seq, f"no longer calls {missing.tool}",
                              recorded=missing.describe())
        if not isinstance(result, (dict, Done)):
            return Divergence(step_no, 0, f"the step returns {type(result).__name__}, not a state")
        return result

    def _new_work(self):
        position = self.replay.last_position
        if self._goes_on():
            step_no, seq = (position[1], position[2]) if position else (0, 0)
            return Divergence(step_no, seq, "a call the history does not have")
        return _END

    def _goes_on(self) -> bool:
        return self.replay.replaying

    def _at_last(self, why: str) -> Divergence:
        position = self.replay.last_position or (self.run.branch, 0, 0)
        return Divergence(position[1], position[2], why)

    def _done_at(self, step: int) -> Verdict:
        if self.replay.replaying or step < self.run.step_no:
            return self._diverged(Divergence(step, 0, "the run ends where its history goes on"))
        return self.verdict

    def _diverged(self, divergence: Divergence) -> Verdict:
        self.verdict.clean, self.verdict.divergence = False, divergence
        return self.verdict


_END = object()


def _differs(exc: NonDeterminismError) -> Divergence:
    recorded, attempted = exc.recorded or {}, exc.attempted or {}
    if (recorded.get("kind"), recorded.get("tool")) == (attempted.get("kind"),
                                                          attempted.get("tool")):
        why = f"{attempted.get('tool')} args differ"
    elif recorded.get("kind") == r.PATCH:
        why = f"{attempted.get('tool')} where the history has patch marker {recorded.get('tool')}"
    else:
        why = f"{attempted.get('tool')} where the history has {recorded.get('tool')}"
    _, step_no, seq = exc.position
    return Divergence(step_no, seq, why, recorded=recorded, attempted=attempted)


def _copy(state):
    """The state as it stands now (the replay goes on changing its own)."""
    return json.loads(serde.dumps(state)) if state is not None else None
