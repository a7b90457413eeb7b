"""One claim of one run: resume from the latest checkpoint, run steps, hand back.

A session owns the run through `epoch`; every write goes through `commit`,
which the store refuses once another owner has claimed the run.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from . import control, events, family, metering, observe, serde
from . import records as r
from .context import RunContext, Stop, StoreFailure, Suspend
from .errors import (
    AgentNotFoundError,
    DurableError,
    FencedError,
    InDoubtEffectError,
    NonDeterminismError,
    StateNotSerializableError,
    StateTooLargeError,
)
from .faults import faults
from .gates import DEFAULT_GATES, Held, Hold
from .lease import LeaseState
from .registry import Agent, AgentRegistry, Done
from .replay import ReplayState
from .serde import check_serializable, encode_state


@dataclass
class WorkerConfig:
    owner: str
    lease_seconds: float = 10.0
    slice_seconds: float = 5.0
    crash_loop_limit: int = 3
    # Asked before every new call (runs/durable/gates.py): budgets, approvals.
    gates: tuple = DEFAULT_GATES
    # price(model, prompt_tokens, completion_tokens) -> dollars, for metered calls
    # (runs/durable/metering.py); None: usage is counted in tokens, at no cost.
    price: Callable[[str, int, int], float] | None = None
    # launched(run_id): a child run was launched (docs/children.md); the runtime hands
    # it to a worker at once instead of waiting for the sweep.
    launched: Callable[[str], None] | None = None


class Outcome:
    NOT_CLAIMED = "not_claimed"
    YIELDED = "yielded"        # time slice used up: queued again, wants a new task
    HANDED_OFF = "handed_off"  # the worker is shutting down: queued again
    WAITING = "waiting"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
    FENCED = "fenced"
    ABANDONED = "abandoned"    # the store failed mid-run (see execute_run's reconnect)


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


class RunSession:
    observed: observe.SessionObserver = observe.NOOP_SESSION  # execute_run sets the claim's

    def __init__(self, store, registry: AgentRegistry, config: WorkerConfig, claim: r.Claim,
                 stop_event: threading.Event | None = None):
        self.store = store
        self.registry = registry
        self.config = config
        self.owner = config.owner
        self.run = claim.run
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
        # Filled from the load; settling (see runs/durable/replay.py) after a crash.
        self.replay = ReplayState(settling=claim.crashed)
        self._buffer: list[r.EffectRecord] = []
        self._events: list[events.Event] = []
        self._progress: dict = {}
        self._crash_pending = False
        self._base: tuple[int, int, bytes] | None = None  # (number, branch, raw JSON)
        self._chain = serde.Chain()
        self._lock = threading.RLock()     # one commit at a time
        self._journal = threading.Lock()   # the buffers above

    # --- the run loop ---------------------------------------------------------------
    def execute(self) -> str:
        try:
            return self._execute()
        except Stop as stop:
            return self._stop(stop.why, dirty_state=None)
        except FencedError:
            return Outcome.FENCED
        except StoreFailure as failure:
            self.store_error = failure.__cause__
            return Outcome.ABANDONED

    def _execute(self) -> str:
        crash_count = self._crash_count()
        self._crash_pending = crash_count > 0
        agent = self._agent_or_attention(crash_count)
        if isinstance(agent, str):
            return agent  # the outcome of a run that cannot go on
        if self.control in (r.PAUSE, r.CANCEL) and not self.settles_cancel():
            raise Stop(self.control)
        started = self._resume(agent, crash_count)
        if isinstance(started, str):
            return started
        state, step_no = started
        return self._loop(agent, state, step_no)

    def _agent_or_attention(self, crash_count: int) -> Agent | str:
        """The run's agent, or the outcome of a run that needs an operator first: it keeps
        crashing its worker, its agent is gone, or its code changed."""
        run = self.run
        if crash_count >= self.config.crash_loop_limit:
            return self._attention("crash_loop", f"the run crashed its worker {crash_count} "
                                   f"times in step {run.step_no + 1}", {"crashes": crash_count})
        try:
            agent = self.registry.get(run.agent)
        except AgentNotFoundError as exc:
            return self._attention("unknown_agent", str(exc), {"agent": run.agent})
        if str(agent.version) != str(run.agent_version):
            return self._attention(
                "version_drift", f"code changed: {run.agent_version} → {agent.version}",
                {"recorded": run.agent_version, "current": str(agent.version)})
        return agent

    def _resume(self, agent: Agent, crash_count: int) -> tuple[dict, int] | str:
        """(state, completed steps) to go on from: the agent's start, or the latest
        checkpoint (with on_resume after time away); or the outcome if that failed."""
        loaded = self.loaded or self.store.load(self.run.id)
        self.loaded = None
        self.run = run = _merge_claim(loaded.run, self.run)
        self.replay = ReplayState(loaded.effects, settling=self.replay.settling)
        run_update = {"status": r.RUNNING, "crash_count": crash_count,
                      "crash_step": run.step_no, "suspended_at": None, "attention": None}
        away = self.crashed or run.suspended_at is not None
        if run.suspended_at is not None:
            self.suspended_for = max(0.0, time.time() - run.suspended_at)
        elif self.crashed:
            # The claim replaced the dead worker's lease: its last durable write is the
            # last sign of life we have.
            self.suspended_for = max(0.0, time.time() - _last_write(loaded))

        if loaded.checkpoint is None:
            self.replay.settling = False  # died before its first step: nothing was in flight
            try:
                state = agent.start(dict(run.inputs))
                encode_state(state)
            except Exception as exc:  # noqa: BLE001 - the agent's own failure, as in a step
                return self._fail(exc, 0)
            self._checkpoint(state, 0, reason="start", run_update=run_update,
                             status_event="started")
            return state, 0
        raw = serde.resolve_raw(loaded.bases + [loaded.checkpoint])
        state = serde.json.loads(raw)
        self._base = (loaded.checkpoint.number, loaded.checkpoint.branch, raw)
        self._chain = serde.Chain.of(loaded.bases, loaded.checkpoint)
        step_no = loaded.checkpoint.step_no
        self._commit(r.Commit(run=run_update, events=[events.status(
            r.RUNNING, resumed_from=loaded.checkpoint.number,
            after="crash" if self.crashed else "suspension" if away else "slice",
            worker=self.owner, epoch=self.epoch)]))
        if away and agent.has_on_resume() and not self.settles_cancel():
            try:
                state = self._on_resume(agent, state, step_no)
            except FencedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the agent's own failure, as in a step
                return self._fail(exc, step_no + 1)
        return state, step_no

    def _loop(self, agent: Agent, state: dict, step_no: int) -> str:
        """Steps until the run ends, waits, is stopped or its slice is used up."""
        slice_started = time.monotonic()
        cadence = _Cadence(agent)
        first = True
        while True:
            dirty = state if cadence.pending else None
            why = self._boundary(first, slice_started)
            if why is not None:
                return self._stop(why, dirty, step_no)
            first = False
            try:
                result = self._run_step(agent, RunContext(self, step_no + 1), state)
            except (Suspend, Stop, Held, Exception) as exc:
                return self._step_cut_short(exc, dirty, step_no)
            step_no += 1
            if isinstance(result, Done):
                return self._succeed(result.output, step_no)
            if not isinstance(result, dict):
                return self._fail(TypeError(f"step must return a dict state or Done(...), got "
                                            f"{type(result).__name__}"), step_no)
            state = result
            if cadence.stepped():
                try:
                    self._checkpoint(state, step_no)
                except (StateNotSerializableError, StateTooLargeError) as exc:
                    return self._fail(exc, step_no)
                cadence.checkpointed()

    def _boundary(self, first: bool, slice_started: float) -> str | None:
        """Why the run stops before its next step, if it does: a shutdown, fencing, an
        operator's pause or cancel (not before the first step while settling), the slice
        used up. The slice is read at every boundary: a worker holding many runs shortens
        it when other runs start waiting for a slot (runs/worker/execute.py)."""
        if self.stop_event.is_set():
            return "shutdown"
        if self.fenced:
            return "fenced"
        if self.control in (r.PAUSE, r.CANCEL) and not (first and self.settles_cancel()):
            return self.control
        if not first and time.monotonic() >= slice_started + self.config.slice_seconds:
            return "slice"
        return None

    def _step_cut_short(self, exc: BaseException, dirty, step_no: int) -> str:
        """The outcome of a step that did not return: a wait, a stop, a halted replay, or
        the agent's own failure (which fails the run and keeps the checkpoint)."""
        if isinstance(exc, Suspend):
            return self._suspend(exc, dirty, step_no)
        if isinstance(exc, Held):
            # Replayed up to the held call once the run goes on, like a stopped step.
            self._buffer, self._events, self._progress = [], [], {}
            return self._hold(exc.hold, step_no)
        if isinstance(exc, Stop):
            if exc.why != r.CANCEL:
                # The step is cut short and will run again from its start; that replay
                # re-emits what it buffered since its last logged effect (logs,
                # progress, now()/random()): writing it now would duplicate it.
                self._buffer, self._events, self._progress = [], [], {}
            return self._stop(exc.why, None, step_no)
        if isinstance(exc, FencedError):
            return Outcome.FENCED
        if isinstance(exc, NonDeterminismError):
            return self._attention("non_determinism", str(exc), {
                "position": list(exc.position), "recorded": exc.recorded,
                "attempted": exc.attempted})
        if isinstance(exc, InDoubtEffectError):
            recorded = exc.record
            return self._attention("in_doubt", str(exc), {
                "position": list(exc.position), "seq": exc.position[2],
                "step_no": exc.position[1], "tool": exc.tool, "key": exc.key,
                "error": exc.error,
                "args_preview": recorded.args_preview if recorded else "",
                "started_at": recorded.started_at if recorded else None,
                "worker": recorded.worker if recorded else ""})
        return self._fail(exc, step_no + 1)

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
            self._checkpoint(new_state, step_no, reason="resume")
        else:
            self._flush()
        return new_state

    # --- endings ------------------------------------------------------------------------
    def _succeed(self, output, step_no: int) -> str:
        try:
            check_serializable(output, "output")
        except StateNotSerializableError as exc:
            return self._fail(exc, step_no)
        self._commit(r.Commit(
            run={"status": r.SUCCEEDED, "output": output, "step_no": step_no, "control": None},
            events=[events.output(output), events.status(r.SUCCEEDED)],
            release=True))
        return Outcome.SUCCEEDED

    def _fail(self, exc: BaseException, step_no: int) -> str:
        error = {"type": type(exc).__name__, "message": str(exc), "step_no": step_no,
                 "traceback": "".join(traceback.format_exception(exc))[-8000:]}
        if isinstance(exc, StateNotSerializableError):
            error["path"] = exc.path
        self._commit(r.Commit(run={"status": r.FAILED, "error": error, "suspended_at": time.time()},
                              events=[events.status(r.FAILED, error=error["message"],
                                                    type=error["type"], step=step_no)],
                              release=True))
        return Outcome.FAILED

    def _attention(self, kind: str, message: str, details: dict) -> str:
        attention = {"kind": kind, "message": message, **details}
        result = self._commit(r.Commit(
            run={"status": r.NEEDS_ATTENTION, "attention": attention, "suspended_at": time.time(),
                 "crash_count": details.get("crashes", 0)},
            events=[events.status(r.NEEDS_ATTENTION, reason=message, kind=kind)],
            release=True))
        self.observed.attention(kind)
        return self._late_control(result, r.NEEDS_ATTENTION) or Outcome.NEEDS_ATTENTION

    def _suspend(self, suspend: Suspend, dirty_state, step_no: int) -> str:
        for record in suspend.records:
            self._buffer.append(record)
        self._events.extend(suspend.events)
        result = self._commit(r.Commit(
            run={"status": r.WAITING, "wake_at": suspend.wake_at, "suspended_at": time.time(),
                 "attention": {"kind": "waiting", **suspend.reason}},
            events=[events.status(r.WAITING, **suspend.reason)], release=True))
        self.observed.waiting(suspend.reason.get("kind", "timer"))
        return self._late_control(result, r.WAITING) or Outcome.WAITING

    def _hold(self, hold: Hold, step_no: int) -> str:
        """A gate held the next call (runs/durable/gates.py): give the worker up, with
        the reason on the run, until a person acts (or the hold's timer fires)."""
        status = r.WAITING if hold.wait else r.NEEDS_ATTENTION
        attention = {**hold.details, "kind": hold.kind, "message": hold.message,
                     "step_no": step_no + 1}
        result = self._commit(r.Commit(
            run={"status": status, "attention": attention, "suspended_at": time.time(),
                 "wake_at": hold.wake_at if hold.wait else None},
            events=[events.status(status, reason=hold.message, kind=hold.kind)], release=True))
        return self._late_control(result, status) or \
            (Outcome.WAITING if hold.wait else Outcome.NEEDS_ATTENTION)

    def _late_control(self, released: r.CommitResult, status: str) -> str | None:
        """An operator's pause or cancel that landed after this worker last looked and
        before it released the run into `status`: the operator acted on a running run,
        so the request waited for a boundary that will not come until the run wakes
        (an hour's timer, a person's answer). Carry it out now, as pause and cancel do
        to a run that is already waiting (control.pause, control.cancel); None if there
        was none, or the run has moved on (claimed again, acted on: fenced)."""
        wanted = released.control
        if not (wanted == r.CANCEL or (wanted == r.PAUSE and status == r.WAITING)):
            return None
        try:
            return self._stop(wanted, None, expect_status=status)
        except FencedError:
            return None

    def _stop(self, why: str, dirty_state, step_no: int = 0, *,
              expect_status: str | None = None) -> str:
        if why == "fenced":
            return Outcome.FENCED
        if dirty_state is not None:
            self._checkpoint(dirty_state, step_no, reason=why)
        status, outcome = {
            r.PAUSE: (r.PAUSED, Outcome.PAUSED),
            r.CANCEL: (r.CANCELLED, Outcome.CANCELLED),
            "shutdown": (r.QUEUED, Outcome.HANDED_OFF),
            "slice": (r.QUEUED, Outcome.YIELDED),
        }[why]
        # A pause or cancel is done with once honoured; a slice or a hand-off leaves the
        # control as it is: an operator's cancel may have landed since it was last read.
        update = {"status": status, "control": None} if why in (r.PAUSE, r.CANCEL) else \
            {"status": status}
        if why == r.CANCEL:
            update.update(attention=None, wake_at=None)  # what it waited for is over
        if why != "slice":
            update["suspended_at"] = time.time()
        faults.hit("before_release", self.run.agent)
        self._commit(r.Commit(run=update, events=[events.status(status, reason=why)],
                              release=True, expect_status=expect_status))
        if why == r.CANCEL:
            # The operator's cancel cascaded to the children it found; one spawned
            # before this run saw the cancel is cancelled here (docs/children.md).
            control.cancel_children(self.store, self.run.id, actor="system")
        return outcome

    # --- writes -------------------------------------------------------------------------
    def _checkpoint(self, state, step_no: int, *, reason: str = "step", run_update=None,
                    status_event: str | None = None) -> None:
        raw = serde.raw_state(state)
        blob, codec, base_number = self._encode_checkpoint(raw)
        checkpoint = r.CheckpointRecord(number=0, branch=self.run.branch, step_no=step_no,
                                        blob=blob, codec=codec, reason=reason,
                                        created_at=time.time(), base_number=base_number)
        update = dict(run_update or {})
        update["step_no"] = step_no
        if self._crash_pending and reason == "step":
            update["crash_count"] = 0  # the step that crashed has now completed
            self._crash_pending = False
        started = []
        if status_event:
            started.append(events.status(r.RUNNING, event=status_event, worker=self.owner,
                                         epoch=self.epoch))
        result = self._commit(r.Commit(run=update, checkpoint=checkpoint, events=started))
        self.observed.checkpoint(checkpoint)
        self._base = (result.checkpoint_number, self.run.branch, raw)
        self._chain = self._chain.after(blob, patched=base_number is not None)
        self.run.step_no = step_no
        faults.hit("after_checkpoint", self.run.agent)
        self.replay.checkpointed(step_no)
        return result

    def _encode_checkpoint(self, raw: bytes):
        """(blob, codec, base_number): a patch against the previous checkpoint of this
        branch when the state is large and the chain is short, else a full one."""
        base = self._base
        if (base is not None and base[1] == self.run.branch and len(raw) > serde.PATCH_ABOVE
                and self._chain.may_extend()):
            patch = serde.encode_patch(raw, base[2])
            if self._chain.worth(patch, raw):
                return patch, serde.PATCH_CODEC, base[0]
        blob, codec = serde.encode_raw(raw)
        return blob, codec, None

    # The calls of a ctx.parallel group log from threads of their own
    # (runs/durable/parallel.py): the buffers have a lock of their own (`_journal`),
    # held only to touch them, and commits one at a time (`_lock`). An outcome logged
    # while another thread commits waits for that commit, then finds itself already
    # written if the other took it along (a group commit: eight calls that finish
    # together cost one write, not eight).
    def log_effect(self, record: r.EffectRecord, *, usage: dict | None = None) -> None:
        """Write an effect (intent or outcome) now, with everything buffered before it;
        `usage`: a metered call's, added to the run's ledger in the same commit (under
        the journal's lock, so parallel calls never lose one another's)."""
        with self._journal:
            self._buffer.append(record)
            if usage is not None:
                self.run.usage = metering.added(self.run.usage, usage)
                self._progress["usage"] = self.run.usage
        with self._lock:
            with self._journal:
                pending = any(e is record for e in self._buffer)
            if pending:
                self._commit(r.Commit())

    def buffer_record(self, record: r.EffectRecord) -> None:
        """now()/random() values: written with the next commit. Until then nothing
        durable depends on them, so losing them in a crash is harmless."""
        with self._journal:
            self._buffer.append(record)

    def emit(self, event: events.Event) -> None:
        """An event, written with the next commit."""
        with self._journal:
            self._events.append(event)

    def write_events(self, written: list[events.Event]) -> None:
        """Events written now (a streaming tool's batch: runs/durable/streaming.py)."""
        self._commit(r.Commit(events=list(written)))

    def set_progress(self, done, total, message: str) -> None:
        """The run's progress, written with the next commit (only the latest of a step)."""
        with self._journal:
            self._progress = {"progress_done": done, "progress_total": total,
                              "progress_message": message}
            self._events = [e for e in self._events if e[0] != "progress"]
            self._events.append(events.progress(done, total, message))

    def _flush(self) -> None:
        if self._buffer or self._events or self._progress:
            self._commit(r.Commit())

    def _commit(self, commit: r.Commit) -> r.CommitResult:
        with self._lock:
            with self._journal:  # what is buffered now goes; later ones wait for the next
                buffer, buffered_events, progress = self._buffer, self._events, self._progress
                self._buffer, self._events, self._progress = [], [], {}
            for record in buffer:
                record.epoch = self.epoch
            commit.family = commit.family or family.is_family_commit(commit, self.run)
            effect_events = [events.effect(e) for e in buffer if e.kind == r.CALL]
            commit.effects = buffer + commit.effects
            commit.events = buffered_events + effect_events + commit.events
            if progress:
                commit.run = {**progress, **commit.run}
            if not commit.release:
                commit.run.setdefault("lease_expires_at",
                                      time.time() + self.config.lease_seconds)
            try:
                try:
                    result = self.store.commit(self.run.id, self.epoch, commit)
                except BaseException:
                    with self._journal:  # not written: still buffered, as before the commit
                        self._buffer = buffer + self._buffer
                        self._events = buffered_events + self._events
                        self._progress = self._progress or progress
                    raise
            except FencedError:
                self.lease.lost()  # even if the agent swallows the error, no more effects
                raise
            except DurableError:
                raise
            except Exception as exc:
                raise StoreFailure() from exc
            if commit.release:
                self.lease.read_control(result.control)
            else:
                self.lease.renewed(commit.run["lease_expires_at"], result.control)
            return result

    # --- lease and boundaries --------------------------------------------------------------
    def settles_cancel(self) -> bool:
        """A cancel is pending and the step must first be settled (ReplayState.settling)."""
        return self.replay.settling and self.control == r.CANCEL

    def effect_boundary(self, *, settles: bool = False) -> None:
        """Before a new effect: honour shutdown, pause and cancel, and fencing.

        `settles`: the effect is an idempotent call, which may be the one a dead
        worker left in flight (see ReplayState.settling)."""
        if self.fenced:
            raise Stop("fenced")
        if self.stop_event.is_set():
            raise Stop("shutdown")
        if self.replay.settled() and settles and self.control == r.CANCEL:
            return
        if self.control in (r.PAUSE, r.CANCEL):
            raise Stop(self.control)

    def ensure_lease(self) -> None:
        """Before touching the outside world, make sure the lease is still ours.

        A process that was frozen (SIGSTOP) past its lease finds out here, not
        after it has called the tool."""
        if time.time() + 0.5 >= self.lease.expires_at:
            try:
                self.renew()
            except DurableError:
                raise
            except Exception as exc:  # not a tool's failure: no tool call without a lease
                raise StoreFailure() from exc

    def renew(self) -> None:
        faults.hit("lease_renewal", self.run.agent)
        expires = time.time() + self.config.lease_seconds
        try:
            control = self.store.renew(self.run.id, self.epoch, expires)
        except FencedError:
            self.lease.lost()
            raise
        self.lease.renewed(expires, control)

    @property
    def fenced(self) -> bool:
        return self.lease.fenced

    @property
    def control(self) -> str | None:
        return self.lease.control

    def _crash_count(self) -> int:
        if not self.crashed:
            return 0
        if self.run.crash_step == self.run.step_no:
            return self.run.crash_count + 1
        return 1


def _last_write(loaded: r.Loaded) -> float:
    times = [loaded.checkpoint.created_at if loaded.checkpoint else loaded.run.created_at]
    times += [e.finished_at or e.started_at for e in loaded.effects]
    return max((t for t in times if t), default=time.time())


def _merge_claim(loaded: r.RunRecord, claimed: r.RunRecord) -> r.RunRecord:
    loaded.epoch = claimed.epoch
    loaded.lease_owner = claimed.lease_owner
    loaded.lease_expires_at = claimed.lease_expires_at
    return loaded


__all__ = ["RunSession", "WorkerConfig", "Outcome", "DurableError"]
