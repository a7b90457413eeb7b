"""Sub-agents: ctx.spawn, ctx.wait and ctx.wait_all (docs/children.md).

A spawn is an effect of the parent at its position: logged once the child is
launched, replayed (the same child handle) ever after. Its idempotency key is the
child's `spawn_key`, unique among runs, so a step cut short between the launch and
the log finds the child it launched instead of launching another.

A wait is an effect too, logged once every child it names is final, with their
outcomes in the order asked: a replay returns the same outcomes. Until then the
parent gives its worker up (`waiting`, no lease, no slot) and is woken by the store
when one of the children it waits on ends (runs/durable/family.py). A spawn beyond
the cap of running children waits the same way for one to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import clock, control, events, family
from . import records as r
from .errors import ChildFailedError, DurableError, StoreFailure, Suspend
from .faults import faults

if TYPE_CHECKING:  # pragma: no cover
    from .step import Step

DEFAULT_MAX_CHILDREN = 10


@dataclass(frozen=True)
class Child:
    """A handle on a child run, what ctx.spawn returns and ctx.wait takes. Plain data:
    it may be kept in the parent's state as `handle.as_state()`."""

    run_id: str
    agent: str

    def as_state(self) -> dict:
        return {"run_id": self.run_id, "agent": self.agent}

    @classmethod
    def of(cls, value) -> Child:
        if isinstance(value, Child):
            return value
        if isinstance(value, dict) and isinstance(value.get("run_id"), str):
            return cls(value["run_id"], str(value.get("agent", "")))
        raise TypeError(f"ctx.wait needs handles from ctx.spawn, got {value!r}")


def spawn(step: Step, agent: str, inputs: dict | None, *, max_children: int) -> Child:
    if not isinstance(max_children, int) or isinstance(max_children, bool) or max_children < 1:
        raise ValueError(f"max_children must be a positive integer, not {max_children!r}")
    inputs = dict(inputs or {})
    position, recorded = step.next(r.SPAWN, r.SPAWN, (agent, inputs), {})
    if recorded is not None:
        return Child.of(recorded.result)
    host = step.host
    host.effect_boundary()
    record = step.new_record(position, r.SPAWN, None, (agent, inputs), {})
    # Only the children still running are read (at most the cap), not all of them: the
    # one this spawn launched before a crash is among them, or has ended, and then the
    # launch below returns it (its key is taken).
    running = _store(host.store.children, step.run_id, active_only=True)
    child = next((c for c in running if c.spawn_key == record.key), None)
    if child is None:
        active = [c.id for c in running]
        if len(active) >= max_children:
            raise Suspend(wake_at=clock.now() + family.RECHECK_SECONDS,
                          reason=_waiting("slot", active, position, max_children=max_children),
                          records=[], events=[])
        child = _launch(step, agent, inputs, record.key)
    record.args = {"agent": agent}
    record.done({"run_id": child.id, "agent": agent}, at=clock.now())
    host.emit(events.spawned(child.id, agent, record.key))
    host.log_effect(record)
    return Child(child.id, agent)


def _launch(step: Step, agent: str, inputs: dict, spawn_key: str) -> r.RunRecord:
    """The child run, launched under the spawn's key (owned by the run's owner), and
    handed to the runtime at once."""
    host = step.host
    host.ensure_lease()
    run = host.run
    child = _store(control.launch, host.store, agent=agent, inputs=inputs, owner=run.owner,
                   registry=host.registry, parent_id=run.id, spawn_key=spawn_key)
    faults.hit("after_spawn_before_log", run.agent)
    if host.config.launched is not None:
        host.config.launched(child.id)
    return child


def wait_all(step: Step, handles, *, return_exceptions: bool = False) -> list:
    wanted = [Child.of(h) for h in handles]
    ids = [c.run_id for c in wanted]
    position, recorded = step.next(r.JOIN, r.JOIN, (ids,), {})
    if recorded is None:
        recorded = _joined(step, position, ids)
    results = []
    for done in recorded.result:
        if done["status"] == r.SUCCEEDED:
            results.append(done["output"])
            continue
        error = ChildFailedError(done["run_id"], done["agent"], done["status"], done["error"])
        if not return_exceptions:
            raise error
        results.append(error)
    return results


def _joined(step: Step, position, ids: list[str]) -> r.EffectRecord:
    """The wait logged once every child it names has ended, with their outcomes; until
    then the run waits (Suspend) to be woken by the store (runs/durable/family.py)."""
    host = step.host
    runs = {c.id: c for c in _store(host.store.children, step.run_id)}
    strangers = [i for i in ids if i not in runs]
    if strangers:
        raise ValueError(f"not children of this run: {', '.join(strangers)}")
    pending = [i for i in ids if runs[i].status not in r.FINAL_STATUSES]
    if pending:
        host.effect_boundary()  # a pending pause or cancel stops here, not later
        faults.hit("before_children_wait", host.run.agent)
        raise Suspend(wake_at=clock.now() + family.RECHECK_SECONDS,
                      reason=_waiting("all", pending, position), records=[], events=[])
    record = step.new_record(position, r.JOIN, None, (ids,), {})
    record.done([outcome(runs[i]) for i in ids], at=clock.now())
    host.log_effect(record)
    return record


def _store(fn, *args, **kwargs):
    """A read or a launch through the store, from inside a step: the store's own failure
    (a lost connection) is not the agent's, so it ends the session as any store failure
    does (StoreFailure) instead of failing the run; the engine's errors (an unknown
    agent, invalid inputs) are the agent's and reach its step."""
    try:
        return fn(*args, **kwargs)
    except DurableError:
        raise
    except Exception as exc:
        raise StoreFailure() from exc


def outcome(run: r.RunRecord) -> dict[str, Any]:
    """What a wait logs of a final child: enough to return or raise it on every replay."""
    error = None
    if run.status == r.FAILED:
        error = f"{(run.error or {}).get('type', 'Error')}: {(run.error or {}).get('message', '')}"
    elif run.status == r.CANCELLED:
        error = "cancelled"
    return {"run_id": run.id, "agent": run.agent, "status": run.status,
            "output": run.output if run.status == r.SUCCEEDED else None, "error": error}


def _waiting(what: str, pending: list[str], position, **details) -> dict:
    return {"kind": family.WAITING_FOR, "waiting_for": what, "pending": pending,
            "step_no": position[1], "seq": position[2], **details}
