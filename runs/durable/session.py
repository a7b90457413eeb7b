"""One claim of one run: resume from the latest checkpoint, run steps, hand back.

A session owns the run through `epoch`. It is the StepHost its steps' contexts talk to
(runs/durable/host.py), made of parts with one role each: its writes go through its
journal (journal.py: every write is one fenced commit), its boundaries and its lease
are boundaries.py's, its checkpoints' encoding checkpoints.py's, and how the claim ends
is endings.py's. What is here is the run loop: the checks a claim starts with (a crash
loop, an unknown agent, another code), the resume, then step after step.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from . import crashes, endings, events, observe, serde, upgrade, versions
from . import records as r
from .boundaries import Boundaries
from .checkpoints import CheckpointWriter
from .config import WorkerConfig
from .context import RunContext
from .endings import Outcome
from .errors import (
    AgentNotFoundError,
    DurableError,
    FencedError,
    Held,
    StateNotSerializableError,
    StateTooLargeError,
    Stop,
    StoreFailure,
    Suspend,
)
from .faults import faults
from .journal import Journal
from .lease import LeaseState
from .registry import Agent, AgentRegistry, Done
from .replay import ReplayState
from .serde import encode_state


class _Cadence:
    """When a step's state is checkpointed: after `checkpoint_every` steps, or once
    `checkpoint_seconds` have passed since the last checkpoint."""

    def __init__(self, agent: Agent):
        self.every = max(1, int(agent.checkpoint_every or 1))
        self.seconds = agent.checkpoint_seconds
        self.pending = 0  # steps completed since the last checkpoint
        self.since = time.monotonic()

    def stepped(self) -> bool:
        """A step completed: is its state checkpointed now?"""
        self.pending += 1
        return self.pending >= self.every or (
            self.seconds is not None and time.monotonic() - self.since >= self.seconds)

    def checkpointed(self) -> None:
        self.pending, self.since = 0, time.monotonic()


class _Unsaved:
    """The state the steps since the last checkpoint left, as JSON taken before the next
    step runs. A step may change its state dict in place (the crawl agent takes a batch
    off its frontier) and then be cut short: a stop at its next call, a wait. What is
    checkpointed then for the steps before it must be their state, not the same dict
    with the cut step's half-done changes: the next owner replays the cut step from
    that checkpoint against its logged calls, and would take other items than they hold
    (non-determinism), or skip some without an error."""

    def __init__(self, raw: bytes):
        self._raw = raw

    @classmethod
    def of(cls, state) -> _Unsaved:
        return cls(serde.raw_state(state))

    def state(self) -> dict:
        return serde.json.loads(self._raw)


class RunSession:
    observed: observe.SessionObserver = observe.NOOP_SESSION  # execute_run sets the claim's

    def __init__(self, store, registry: AgentRegistry, config: WorkerConfig, claim: r.Claim,
                 stop_event: threading.Event | None = None):
        self.store, self.registry, self.config = store, registry, config
        self.owner = config.owner
        self.run = claim.run  # the one record of the run all parts read, kept up to date
        self.crashed = claim.crashed
        self.loaded = claim.loaded
        self.epoch = claim.run.epoch
        self.stop_event = stop_event or threading.Event()
        # the lease, fencing and the pending control request, which renewals on other
        # threads report too (runs/durable/lease.py)
        self.lease = LeaseState(claim.run.id, claim.run.epoch, config.owner,
                                claim.run.lease_expires_at or 0.0, claim.run.control)
        self.suspended_for = 0.0
        self.store_error: BaseException | None = None  # why the run was ABANDONED
        # Where the session took the run up: (completed steps, outcomes since the
        # checkpoint), once loaded. execute_run tells a store failing the run again and
        # again from a database that blinks while the run goes on by it.
        self.resumed_at: tuple[int, int] | None = None
        # Filled from the load; settling (see runs/durable/replay.py) when the last
        # session ended mid-step: a crash, or a store failure whose worker released the
        # run once the store answered (its status still says running: every ending at a
        # boundary writes another).
        self.replay = ReplayState(settling=claim.crashed or claim.run.status == r.RUNNING)
        self.journal = Journal(store, self.run, self.lease, config.lease_seconds)
        self.boundaries = Boundaries(store, self.run, config, self.lease, self.replay,
                                     self.stop_event)
        self.checkpoints = CheckpointWriter()
        self._crash_pending = False

    # --- the StepHost (runs/durable/host.py): the journal's and the boundaries' ---------------
    @property
    def control(self) -> str | None:
        return self.lease.control

    @property
    def fenced(self) -> bool:
        return self.lease.fenced

    def effect_boundary(self, *, settles: bool = False) -> None:
        self.boundaries.before_effect(settles=settles)

    def ensure_lease(self) -> None:
        self.boundaries.ensure_lease()

    def settles_cancel(self) -> bool:
        return self.boundaries.settles_cancel()

    def renew(self) -> None:
        self.boundaries.renew()

    def log_effect(self, record: r.EffectRecord, *, usage: dict | None = None) -> None:
        self.journal.log_effect(record, usage=usage)

    def buffer_record(self, record: r.EffectRecord) -> None:
        self.journal.buffer_record(record)

    def emit(self, event: events.Event) -> None:
        self.journal.emit(event)

    def set_progress(self, done, total, message: str) -> None:
        self.journal.set_progress(done, total, message)

    def write_events(self, written: list[events.Event]) -> None:
        self.journal.write_events(written)

    # --- the run loop ---------------------------------------------------------------
    def execute(self) -> str:
        try:
            return self._execute()
        except Stop as stop:
            return endings.stopped(self, stop.why, dirty_state=None)
        except FencedError:
            return Outcome.FENCED
        except StoreFailure as failure:
            self.store_error = failure.__cause__
            return Outcome.ABANDONED

    def _execute(self) -> str:
        progress = crashes.progress(self._load())
        self.resumed_at = (self.run.step_no, progress)
        crash_count = crashes.count(self.run, self.crashed, progress)
        claimed = crashes.claimed(self.run, crash_count, progress)
        self._crash_pending = crash_count > 0
        agent = self._agent_or_attention(crash_count)
        if isinstance(agent, str):
            return agent  # the outcome of a run that cannot go on
        if self.control in (r.PAUSE, r.CANCEL) and not self.settles_cancel():
            raise Stop(self.control)
        started = self._resume(agent, claimed)
        if isinstance(started, str):
            return started
        state, step_no = started
        return self._loop(agent, state, step_no)

    def _load(self) -> r.Loaded:
        """What the claim resumes from (some stores read it with the claim), its run
        the session's: as loaded, but for what the claim set (epoch and lease)."""
        loaded = self.loaded or self.store.load(self.run.id)
        _take_loaded(self.run, loaded.run)
        loaded.run = self.run
        self.loaded = loaded
        return loaded

    def _agent_or_attention(self, crash_count: int) -> Agent | str:
        """The run's agent, or the outcome of a run that needs an operator first: it keeps
        crashing its worker, its agent is gone, or its code changed."""
        run = self.run
        if crash_count >= self.config.crash_loop_limit:
            return endings.needs_attention(
                self, "crash_loop", f"the run crashed its worker {crash_count} times in step "
                f"{run.step_no + 1}", {"crashes": crash_count})
        try:
            agent = self.registry.get(run.agent)
        except AgentNotFoundError as exc:
            return endings.needs_attention(self, "unknown_agent", str(exc), {"agent": run.agent})
        if versions.fingerprint(type(agent)) != run.code_fingerprint:
            return self._take_over(agent)
        return agent

    def _take_over(self, agent: Agent) -> Agent | str:
        """A run of another code of this agent (runs/durable/upgrade.py): moved onto this
        code if its history replays cleanly here, else handed back for a worker of its
        own code, saying why."""
        run = self.run
        if upgrade.later_than(run, agent):
            return self._hand_back(upgrade.waiting_for_version(run, agent, later=True))
        try:
            # The whole live branch: what the session loaded is its tail since the
            # latest checkpoint, and the new code must rebuild the state before it.
            verdict = upgrade.verify(self.store, run, agent, self.registry)
        except DurableError:
            raise
        except Exception as exc:  # the store's failure, not the run's
            raise StoreFailure() from exc
        if not verdict.clean:
            return self._hand_back(upgrade.waiting_for_version(run, agent,
                                                               divergence=verdict.divergence))
        loaded = self.loaded
        latest = serde.resolve_raw([*loaded.bases, loaded.checkpoint]) if loaded.checkpoint \
            else None
        commit = upgrade.moved(run, agent, verdict, latest)
        result = self.journal.commit(commit)
        for name, value in commit.run.fields().items():
            setattr(run, name, value)  # the run as moved: its version and code
        if commit.checkpoint is not None:
            # The resume starts from the new code's state, at the same step: the same
            # effects follow it, nothing to read again.
            written = dataclasses.replace(commit.checkpoint, number=result.checkpoint_number)
            self.loaded = dataclasses.replace(loaded, checkpoint=written, bases=[])
        return agent

    def _hand_back(self, attention: dict) -> str:
        self.journal.commit(upgrade.handed_back(self.run, attention))
        self.observed.waiting(upgrade.VERSION_WAIT)
        return Outcome.VERSION_WAIT

    def _resume(self, agent: Agent, claimed: r.RunChanges) -> tuple[dict, int] | str:
        """(state, completed steps) to go on from: the agent's start, or the latest
        checkpoint (with on_resume after time away); or the outcome if that failed.
        `claimed`: the claim's crash count and progress mark (crashes.py)."""
        loaded, self.loaded = self.loaded, None
        self.replay.load(loaded.effects)
        running = dataclasses.replace(claimed, status=r.RUNNING, suspended_at=None,
                                      attention=None)
        away = self._away(loaded)
        if loaded.checkpoint is None:
            return self._start(agent, running)
        state = serde.json.loads(self.checkpoints.resumed(loaded))
        step_no = loaded.checkpoint.step_no
        self.journal.commit(r.Commit(run=running, events=[events.status(
            r.RUNNING, resumed_from=loaded.checkpoint.number,
            after="crash" if self.crashed else "suspension" if away else "slice",
            worker=self.owner, epoch=self.epoch)]))
        if away and agent.has_on_resume() and not self.settles_cancel():
            try:
                state = self._on_resume(agent, state, step_no)
            except FencedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the agent's own failure, as in a step
                return endings.fail(self, exc, step_no + 1)
        return state, step_no

    def _away(self, loaded: r.Loaded) -> bool:
        """Whether the run comes back from time away (a crash, a wait, a pause), and
        for how long it was away (`suspended_for`)."""
        if self.run.suspended_at is not None:
            self.suspended_for = max(0.0, time.time() - self.run.suspended_at)
        elif self.crashed:
            # The claim replaced the dead worker's lease: its last durable write is the
            # last sign of life we have.
            self.suspended_for = max(0.0, time.time() - _last_write(loaded))
        return self.crashed or self.run.suspended_at is not None

    def _start(self, agent: Agent, running: r.RunChanges) -> tuple[dict, int] | str:
        """The run's first state, from its inputs, checkpointed as it starts."""
        self.replay.settling = False  # died before its first step: nothing was in flight
        try:
            state = agent.start(dict(self.run.inputs))
            encode_state(state)
        except Exception as exc:  # noqa: BLE001 - the agent's own failure, as in a step
            return endings.fail(self, exc, 0)
        self.checkpoint(state, 0, reason="start", running=running, status_event="started")
        return state, 0

    def _loop(self, agent: Agent, state: dict, step_no: int) -> str:
        """Steps until the run ends, waits, is stopped or its slice is used up."""
        slice_started = time.monotonic()
        cadence = _Cadence(agent)
        first = True
        while True:
            why = self.boundaries.before_step(first, slice_started)
            if why is not None:
                return endings.stopped(self, why, state if cadence.pending else None, step_no)
            first = False
            try:
                before = _Unsaved.of(state) if cadence.pending else None
            except (StateNotSerializableError, StateTooLargeError) as exc:
                return endings.fail(self, exc, step_no)
            try:
                result = self._run_step(agent, RunContext(self, step_no + 1), state)
            except (Suspend, Stop, Held, Exception) as exc:
                dirty = before.state() if before is not None else None
                return endings.cut_short(self, exc, dirty, step_no)
            step_no += 1
            if isinstance(result, Done):
                return endings.succeed(self, result.output, step_no)
            if not isinstance(result, dict):
                return endings.fail(self, TypeError(f"step must return a dict state or "
                                                    f"Done(...), got {type(result).__name__}"),
                                    step_no)
            state = result
            if cadence.stepped():
                try:
                    written = self.checkpoint(state, step_no)
                except (StateNotSerializableError, StateTooLargeError) as exc:
                    return endings.fail(self, exc, step_no)
                if written is not None:  # None: the step changed nothing
                    cadence.checkpointed()

    def _run_step(self, agent: Agent, ctx: RunContext, state: dict):
        """A step whose replay was halted (non-determinism, in doubt) ends with that error,
        even when the agent's `except Exception` caught it."""
        try:
            with self.observed.step(ctx.step_no, self.replay.replaying):
                result = agent.step(ctx, state)
        except Exception:
            if self.replay.halted is None:
                raise
        self.replay.raise_if_halted()
        return result

    def _on_resume(self, agent: Agent, state: dict, step_no: int) -> dict:
        # Resume effects sit at step -epoch: fresh on every resume, never replayed.
        ctx = RunContext(self, -self.epoch, live=True)
        before = encode_state(state)
        new_state = agent.on_resume(ctx, state)
        if not isinstance(new_state, dict):
            raise TypeError("on_resume must return the state dict")
        if encode_state(new_state) != before:
            # Checkpoint at once: a replay of the next step must see this same state.
            self.checkpoint(new_state, step_no, reason="resume")
        else:
            self.journal.flush()
        return new_state

    def checkpoint(self, state, step_no: int, *, reason: str = "step",
                   running: r.RunChanges | None = None,
                   status_event: str | None = None) -> r.CommitResult | None:
        """Checkpoint `state` after `step_no` completed steps (with `running`, the run's
        changes as it starts, and its `status_event`): steps up to it never run again.
        None when a step's state is the previous checkpoint's: the step's end is committed
        (its steps done, what it buffered), without a checkpoint."""
        checkpoint, raw = self.checkpoints.record(state, step_no, self.run.branch, reason)
        update = dataclasses.replace(running) if running is not None else r.RunChanges()
        update.step_no = step_no
        if self._crash_pending and reason == "step" and checkpoint is not None:
            # The step that crashed has now completed (a step that changed nothing may be
            # one replayed before it: its end is no progress past the crash).
            update.crash_count = 0
            self._crash_pending = False
        started = []
        if status_event:
            started.append(events.status(r.RUNNING, event=status_event, worker=self.owner,
                                         epoch=self.epoch))
        result = self.journal.commit(r.Commit(run=update, checkpoint=checkpoint, events=started))
        self.run.step_no = step_no
        if checkpoint is None:
            return None  # a resume replays the step from the log
        self.observed.checkpoint(checkpoint)
        self.checkpoints.written(result.checkpoint_number, checkpoint, raw)
        faults.hit("after_checkpoint", self.run.agent)
        self.replay.checkpointed(step_no)
        return result


def _last_write(loaded: r.Loaded) -> float:
    times = [loaded.checkpoint.created_at if loaded.checkpoint else loaded.run.created_at]
    times += [e.finished_at or e.started_at for e in loaded.effects]
    return max((t for t in times if t), default=time.time())


def _take_loaded(claimed: r.RunRecord, loaded: r.RunRecord) -> None:
    """The session's run as loaded, but for what its claim set: its epoch and lease."""
    for f in dataclasses.fields(loaded):
        if f.name not in ("epoch", "lease_owner", "lease_expires_at"):
            setattr(claimed, f.name, getattr(loaded, f.name))


__all__ = ["RunSession", "WorkerConfig", "Outcome", "DurableError"]
