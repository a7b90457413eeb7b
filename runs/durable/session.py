"""One claim of one run: resume from the latest checkpoint, run steps, hand back.

A session owns the run through `epoch`; every write goes through `commit`,
which the store refuses once another owner has claimed the run.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass

from . import records as r
from . import serde
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
from .registry import Agent, AgentRegistry, Done
from .serde import check_serializable, encode_state


@dataclass
class WorkerConfig:
    owner: str
    lease_seconds: float = 10.0
    slice_seconds: float = 5.0
    crash_loop_limit: int = 3


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


class RunSession:
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
        self.control: str | None = claim.run.control
        self.fenced = False
        self.lease_expires_at = claim.run.lease_expires_at or 0.0
        self.suspended_for = 0.0
        self.halted: DurableError | None = None
        self.store_error: BaseException | None = None  # why the run was ABANDONED
        # A cancel that finds its run's worker dead mid-step first settles that step:
        # the step is replayed and the one idempotent call that may have been in
        # flight is issued again under its key (the target dedups), so the effect
        # log shows every write the outside world may hold. No other new effect,
        # and never a non-idempotent one, starts after the cancel.
        self.settling = claim.crashed and claim.run.control == r.CANCEL
        self._replay: dict[tuple, r.EffectRecord] = {}
        self._buffer: list[r.EffectRecord] = []
        self._events: list[tuple[str, dict]] = []
        self._progress: dict = {}
        self._crash_pending = False
        self._base: tuple[int, int, bytes] | None = None  # (number, branch, raw JSON)
        self._chain = serde.Chain()
        self._lock = threading.Lock()

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
        run = self.run
        crash_count = self._crash_count()
        self._crash_pending = crash_count > 0
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
        if run.control in (r.PAUSE, r.CANCEL) and not self.settling:
            raise Stop(run.control)

        loaded = self.loaded or self.store.load(run.id)
        self.loaded = None
        self.run = run = _merge_claim(loaded.run, self.run)
        self._replay = {e.position: e for e in loaded.effects if e.step_no > 0}
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
            self.settling = False  # died before its first step: nothing was in flight
            try:
                state = agent.start(dict(run.inputs))
                encode_state(state)
            except Exception as exc:  # noqa: BLE001 - the agent's own failure, as in a step
                return self._fail(exc, 0)
            self._checkpoint(state, 0, reason="start", run_update=run_update,
                             status_event="started")
            step_no = 0
        else:
            raw = serde.resolve_raw(loaded.bases + [loaded.checkpoint])
            state = serde.json.loads(raw)
            self._base = (loaded.checkpoint.number, loaded.checkpoint.branch, raw)
            self._chain = serde.Chain.of(loaded.bases, loaded.checkpoint)
            step_no = loaded.checkpoint.step_no
            self._commit(r.Commit(run=run_update, events=[
                ("status", {"status": r.RUNNING, "resumed_from": loaded.checkpoint.number,
                            "after": "crash" if self.crashed else "suspension" if away else "slice",
                            "worker": self.owner, "epoch": self.epoch})]))
            if away and agent.has_on_resume() and not self.settling:
                try:
                    state = self._on_resume(agent, state, step_no)
                except FencedError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the agent's own failure, as in a step
                    return self._fail(exc, step_no + 1)
        return self._loop(agent, state, step_no)

    def _loop(self, agent: Agent, state: dict, step_no: int) -> str:
        # The slice is read again at every boundary: a worker holding many runs
        # shortens it when other runs start waiting for a slot (runs/worker.py).
        slice_started = time.monotonic()
        since_checkpoint, checkpoint_time = 0, time.monotonic()
        first = True
        while True:
            dirty = state if since_checkpoint else None
            if self.stop_event.is_set():
                return self._stop("shutdown", dirty, step_no)
            if self.fenced:
                return Outcome.FENCED
            if self.control in (r.PAUSE, r.CANCEL) and not (first and self.settling):
                return self._stop(self.control, dirty, step_no)
            if not first and time.monotonic() >= slice_started + self.config.slice_seconds:
                return self._stop("slice", dirty, step_no)
            first = False
            ctx = RunContext(self, step_no + 1)
            try:
                result = self._run_step(agent, ctx, state)
            except Suspend as suspend:
                return self._suspend(suspend, dirty, step_no)
            except Stop as stop:
                if stop.why != r.CANCEL:
                    # The step is cut short and will run again from its start; that replay
                    # re-emits what it buffered since its last logged effect (logs,
                    # progress, now()/random()): writing it now would duplicate it.
                    self._buffer, self._events, self._progress = [], [], {}
                return self._stop(stop.why, None, step_no)
            except FencedError:
                return Outcome.FENCED
            except NonDeterminismError as exc:
                return self._attention("non_determinism", str(exc), {
                    "position": list(exc.position), "recorded": exc.recorded,
                    "attempted": exc.attempted})
            except InDoubtEffectError as exc:
                recorded = exc.record
                return self._attention("in_doubt", str(exc), {
                    "position": list(exc.position), "seq": exc.position[2],
                    "step_no": exc.position[1], "tool": exc.tool, "key": exc.key,
                    "error": exc.error,
                    "args_preview": recorded.args_preview if recorded else "",
                    "started_at": recorded.started_at if recorded else None,
                    "worker": recorded.worker if recorded else ""})
            except Exception as exc:  # the agent's own failure: fail the run, keep the checkpoint
                return self._fail(exc, step_no + 1)
            step_no += 1
            if isinstance(result, Done):
                return self._succeed(result.output, step_no)
            if not isinstance(result, dict):
                return self._fail(TypeError(f"step must return a dict state or Done(...), got "
                                            f"{type(result).__name__}"), step_no)
            state = result
            since_checkpoint += 1
            every = max(1, int(agent.checkpoint_every or 1))
            due_by_time = (agent.checkpoint_seconds is not None and
                           time.monotonic() - checkpoint_time >= agent.checkpoint_seconds)
            if since_checkpoint >= every or due_by_time:
                try:
                    self._checkpoint(state, step_no)
                except (StateNotSerializableError, StateTooLargeError) as exc:
                    return self._fail(exc, step_no)
                since_checkpoint, checkpoint_time = 0, time.monotonic()

    def _run_step(self, agent: Agent, ctx: RunContext, state: dict):
        """A step whose replay was halted (non-determinism, in doubt) ends with that error,
        even when the agent's `except Exception` caught it."""
        try:
            result = agent.step(ctx, state)
        except Exception:
            if self.halted is None:
                raise
        if self.halted is not None:
            raise self.halted
        return result

    def halt(self, exc: DurableError) -> DurableError:
        """Replay cannot go on: every later effect of this session raises `exc` too."""
        self.halted = exc
        return exc

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
            events=[("output", {"output": output}), ("status", {"status": r.SUCCEEDED})],
            release=True))
        return Outcome.SUCCEEDED

    def _fail(self, exc: BaseException, step_no: int) -> str:
        error = {"type": type(exc).__name__, "message": str(exc), "step_no": step_no,
                 "traceback": "".join(traceback.format_exception(exc))[-8000:]}
        if isinstance(exc, StateNotSerializableError):
            error["path"] = exc.path
        self._commit(r.Commit(run={"status": r.FAILED, "error": error, "suspended_at": time.time()},
                              events=[("status", {"status": r.FAILED, "error": error["message"],
                                                  "type": error["type"], "step": step_no})],
                              release=True))
        return Outcome.FAILED

    def _attention(self, kind: str, message: str, details: dict) -> str:
        attention = {"kind": kind, "message": message, **details}
        self._commit(r.Commit(
            run={"status": r.NEEDS_ATTENTION, "attention": attention, "suspended_at": time.time(),
                 "crash_count": details.get("crashes", 0)},
            events=[("status", {"status": r.NEEDS_ATTENTION, "reason": message, "kind": kind})],
            release=True))
        return Outcome.NEEDS_ATTENTION

    def _suspend(self, suspend: Suspend, dirty_state, step_no: int) -> str:
        for record in suspend.records:
            self._buffer.append(record)
        self._events.extend(suspend.events)
        self._commit(r.Commit(
            run={"status": r.WAITING, "wake_at": suspend.wake_at, "suspended_at": time.time(),
                 "attention": {"kind": "waiting", **suspend.reason}},
            events=[("status", {"status": r.WAITING, **suspend.reason})], release=True))
        return Outcome.WAITING

    def _stop(self, why: str, dirty_state, step_no: int = 0) -> str:
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
        if why != "slice":
            update["suspended_at"] = time.time()
        faults.hit("before_release", self.run.agent)
        self._commit(r.Commit(run=update, events=[("status", {"status": status, "reason": why})],
                              release=True))
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
        events = []
        if status_event:
            events.append(("status", {"status": r.RUNNING, "event": status_event,
                                      "worker": self.owner, "epoch": self.epoch}))
        result = self._commit(r.Commit(run=update, checkpoint=checkpoint, events=events))
        self._base = (result.checkpoint_number, self.run.branch, raw)
        self._chain = self._chain.after(blob, patched=base_number is not None)
        self.run.step_no = step_no
        faults.hit("after_checkpoint", self.run.agent)
        # Steps at or before a checkpoint are never replayed again.
        self._replay = {p: e for p, e in self._replay.items() if p[1] > step_no}
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

    def log_effect(self, record: r.EffectRecord) -> None:
        """Write an effect (intent or outcome) now, with everything buffered before it."""
        self._buffer.append(record)
        self._commit(r.Commit())

    def buffer_record(self, record: r.EffectRecord) -> None:
        """now()/random() values: written with the next commit. Until then nothing
        durable depends on them, so losing them in a crash is harmless."""
        self._buffer.append(record)

    def emit(self, kind: str, data: dict, *, live: bool = False) -> None:
        # Replaying a position that is logged means this event was already written
        # with that position's commit: writing it again would duplicate it for viewers.
        # (on_resume's context is `live`: never replayed, so always written.)
        if self._replay and not live:
            return
        self._events.append((kind, data))

    def set_progress(self, done, total, message: str, *, live: bool = False) -> None:
        if self._replay and not live:
            return
        self._progress = {"progress_done": done, "progress_total": total,
                          "progress_message": message}
        self._events = [e for e in self._events if e[0] != "progress"]
        self._events.append(("progress", {"done": done, "total": total, "message": message}))

    def _flush(self) -> None:
        if self._buffer or self._events or self._progress:
            self._commit(r.Commit())

    def _commit(self, commit: r.Commit) -> r.CommitResult:
        with self._lock:
            for record in self._buffer:
                record.epoch = self.epoch
            effect_events = [("effect", _effect_event(e)) for e in self._buffer if e.kind == r.CALL]
            commit.effects = self._buffer + commit.effects
            commit.events = self._events + effect_events + commit.events
            if self._progress:
                commit.run = {**self._progress, **commit.run}
            if not commit.release:
                self.lease_expires_at = time.time() + self.config.lease_seconds
                commit.run.setdefault("lease_expires_at", self.lease_expires_at)
            try:
                result = self.store.commit(self.run.id, self.epoch, commit)
            except FencedError:
                self.fenced = True  # even if the agent swallows the error, no more effects
                raise
            except DurableError:
                raise
            except Exception as exc:
                raise StoreFailure() from exc
            self._buffer, self._events, self._progress = [], [], {}
            self.control = result.control
            return result

    # --- lease and boundaries --------------------------------------------------------------
    def effect_boundary(self, *, settles: bool = False) -> None:
        """Before a new effect: honour shutdown, pause and cancel, and fencing.

        `settles`: the effect is an idempotent call, which may be the one a dead
        worker left in flight (see `settling`)."""
        if self.fenced:
            raise Stop("fenced")
        if self.stop_event.is_set():
            raise Stop("shutdown")
        if self.settling:
            self.settling = False
            if settles and self.control == r.CANCEL:
                return
        if self.control in (r.PAUSE, r.CANCEL):
            raise Stop(self.control)

    def ensure_lease(self) -> None:
        """Before touching the outside world, make sure the lease is still ours.

        A process that was frozen (SIGSTOP) past its lease finds out here, not
        after it has called the tool."""
        if time.time() + 0.5 >= self.lease_expires_at:
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
            self.control = self.store.renew(self.run.id, self.epoch, expires)
        except FencedError:
            self.fenced = True
            raise
        self.lease_expires_at = expires

    def replay_take(self, position) -> r.EffectRecord | None:
        return self._replay.pop(position, None)

    def replay_pending(self) -> int:
        return len(self._replay)

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


def _effect_event(record: r.EffectRecord) -> dict:
    duration = None
    if record.finished_at and record.started_at:
        duration = round((record.finished_at - record.started_at) * 1000, 2)
    return {"step": record.step_no, "seq": record.seq, "branch": record.branch,
            "tool": record.tool, "key": record.key, "status": record.status,
            "idempotent": record.idempotent, "ms": duration}


__all__ = ["RunSession", "WorkerConfig", "Outcome", "DurableError"]
