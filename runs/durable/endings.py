"""How one claim of a run ends, and what each ending writes: the run succeeded or failed,
waits (a timer, a person, children, a gate's hold), needs an operator, or stops at a
boundary (pause, cancel, shutdown, its time slice used up). Each is one commit that
releases the lease, and each returns the claim's Outcome.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any, Protocol

from . import events
from . import records as r
from .control import lifecycle
from .errors import (
    FencedError,
    Held,
    InDoubtEffectError,
    NonDeterminismError,
    StateNotSerializableError,
    Stop,
    Suspend,
)
from .faults import faults
from .serde import check_serializable

if TYPE_CHECKING:  # pragma: no cover
    from .checkpoints import CheckpointWriter
    from .journal import Journal
    from .observe import SessionObserver
    from .policies.gates import Hold


class Outcome:
    NOT_CLAIMED = "not_claimed"
    YIELDED = "yielded"        # time slice used up: due again for a free worker slot
    HANDED_OFF = "handed_off"  # the worker is shutting down: queued again
    WAITING = "waiting"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
    VERSION_WAIT = "version_wait"  # handed back for a worker of the run's own code
    FENCED = "fenced"
    ABANDONED = "abandoned"    # the store failed mid-run (see execute_run's reconnect)


class Ending(Protocol):
    """What an ending uses of its session (runs/durable/session.py)."""

    run: r.RunRecord
    store: Any
    journal: Journal
    observed: SessionObserver
    checkpoints: CheckpointWriter

    def checkpoint(self, state, step_no: int, *, reason: str = "step") -> Any:
        """Checkpoint `state` after `step_no` steps."""


def succeed(session: Ending, output, step_no: int) -> str:
    try:
        check_serializable(output, "output")
    except StateNotSerializableError as exc:
        return fail(session, exc, step_no)
    session.journal.commit(r.Commit(
        run=r.RunChanges(status=r.SUCCEEDED, output=output, step_no=step_no, control=None),
        events=[events.output(output), events.status(r.SUCCEEDED)], release=True))
    return Outcome.SUCCEEDED


def fail(session: Ending, exc: BaseException, step_no: int) -> str:
    error = {"type": type(exc).__name__, "message": str(exc), "step_no": step_no,
             "traceback": "".join(traceback.format_exception(exc))[-8000:]}
    if isinstance(exc, StateNotSerializableError):
        error["path"] = exc.path
    session.journal.commit(r.Commit(
        run=r.RunChanges(status=r.FAILED, error=error, suspended_at=time.time()),
        events=[events.status(r.FAILED, error=error["message"], type=error["type"],
                              step=step_no)],
        release=True))
    return Outcome.FAILED


def needs_attention(session: Ending, kind: str, message: str, details: dict) -> str:
    attention = {"kind": kind, "message": message, **details}
    result = session.journal.commit(r.Commit(
        run=r.RunChanges(status=r.NEEDS_ATTENTION, attention=attention,
                         suspended_at=time.time(), crash_count=details.get("crashes", 0)),
        events=[events.status(r.NEEDS_ATTENTION, reason=message, kind=kind)], release=True))
    session.observed.attention(kind)
    return _late_control(session, result, r.NEEDS_ATTENTION) or Outcome.NEEDS_ATTENTION


def cut_short(session: Ending, exc: BaseException, dirty, step_no: int) -> str:
    """The outcome of a step that did not return: a wait, a stop, a halted replay, or
    the agent's own failure (which fails the run and keeps the checkpoint). `dirty`:
    the state of the steps completed since the last checkpoint, if any."""
    if isinstance(exc, Suspend):
        if dirty is not None and session.checkpoints.skipped:
            # Steps that changed nothing wrote no checkpoint: a wait checkpoints them,
            # or each wake of a polling run would replay every poll since its last one.
            session.checkpoint(dirty, step_no, reason="wait")
        return suspended(session, exc)
    if isinstance(exc, Held):
        # Replayed up to the held call once the run goes on, like a stopped step.
        session.journal.drop_buffered()
        return held(session, exc.hold, step_no)
    if isinstance(exc, Stop):
        if exc.why != r.CANCEL:
            session.journal.drop_buffered()  # the cut step runs again from its start
        # The steps completed since the last checkpoint are checkpointed first: the
        # next owner resumes after them, replaying only the cut step's effects.
        return stopped(session, exc.why, dirty, step_no)
    if isinstance(exc, FencedError):
        return Outcome.FENCED
    if isinstance(exc, NonDeterminismError):
        return needs_attention(session, "non_determinism", str(exc), {
            "position": list(exc.position), "recorded": exc.recorded,
            "attempted": exc.attempted})
    if isinstance(exc, InDoubtEffectError):
        return needs_attention(session, "in_doubt", str(exc), _in_doubt(exc))
    return fail(session, exc, step_no + 1)


def _in_doubt(exc: InDoubtEffectError) -> dict:
    """What an operator sees of a call in doubt: where, which, and its logged intent."""
    recorded = exc.record
    return {"position": list(exc.position), "seq": exc.position[2],
            "step_no": exc.position[1], "tool": exc.tool, "key": exc.key, "error": exc.error,
            "args_preview": recorded.args_preview if recorded else "",
            "started_at": recorded.started_at if recorded else None,
            "worker": recorded.worker if recorded else ""}


def suspended(session: Ending, suspend: Suspend) -> str:
    """The run waits on a timer or a person (or children): its worker is free."""
    for record in suspend.records:
        session.journal.buffer_record(record)
    for event in suspend.events:
        session.journal.emit(event)
    result = session.journal.commit(r.Commit(
        run=r.RunChanges(status=r.WAITING, wake_at=suspend.wake_at, suspended_at=time.time(),
                         attention={"kind": "waiting", **suspend.reason}),
        events=[events.status(r.WAITING, **suspend.reason)], release=True))
    session.observed.waiting(suspend.reason.get("kind", "timer"))
    return _late_control(session, result, r.WAITING) or Outcome.WAITING


def held(session: Ending, hold: Hold, step_no: int) -> str:
    """A gate held the next call (runs/durable/policies/gates.py): give the worker up, with
    the reason on the run, until a person acts (or the hold's timer fires)."""
    status = r.WAITING if hold.wait else r.NEEDS_ATTENTION
    attention = {**hold.details, "kind": hold.kind, "message": hold.message,
                 "step_no": step_no + 1}
    result = session.journal.commit(r.Commit(
        run=r.RunChanges(status=status, attention=attention, suspended_at=time.time(),
                         wake_at=hold.wake_at if hold.wait else None),
        events=[events.status(status, reason=hold.message, kind=hold.kind)], release=True))
    return _late_control(session, result, status) or \
        (Outcome.WAITING if hold.wait else Outcome.NEEDS_ATTENTION)


def _late_control(session: Ending, released: r.CommitResult, status: str) -> str | None:
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
        return stopped(session, wanted, None, expect_status=status)
    except FencedError:
        return None


# why the run stops -> its status, and the claim's outcome
STOPS = {
    r.PAUSE: (r.PAUSED, Outcome.PAUSED),
    r.CANCEL: (r.CANCELLED, Outcome.CANCELLED),
    "shutdown": (r.QUEUED, Outcome.HANDED_OFF),
    "slice": (r.QUEUED, Outcome.YIELDED),
}


def stopped(session: Ending, why: str, dirty_state, step_no: int = 0, *,
            expect_status: str | None = None) -> str:
    """The run stops at a boundary: pause, cancel, shutdown, its slice used up (or the
    session was fenced: nothing is written). `dirty_state` is checkpointed first."""
    if why == "fenced":
        return Outcome.FENCED
    if dirty_state is not None:
        session.checkpoint(dirty_state, step_no, reason=why)
    status, outcome = STOPS[why]
    # A pause or cancel is done with once honoured; a slice or a hand-off leaves the
    # control as it is: an operator's cancel may have landed since it was last read.
    update = r.RunChanges(status=status)
    if why in (r.PAUSE, r.CANCEL):
        update.control = None
    if why == r.CANCEL:
        update.attention = update.wake_at = None  # what it waited for is over
    if why != "slice":
        update.suspended_at = time.time()
    faults.hit("before_release", session.run.agent)
    session.journal.commit(r.Commit(run=update, events=[events.status(status, reason=why)],
                                    release=True, expect_status=expect_status))
    if why == r.CANCEL:
        # The operator's cancel cascaded to the children it found; one spawned
        # before this run saw the cancel is cancelled here (docs/children.md).
        lifecycle.cancel_children(session.store, session.run.id, actor="system")
    return outcome
