"""What a worker gives the engine: who it is, how long a lease and a slice last, and the
policies and hooks of its deployment. `execute_run(store, run_id, config)` runs under it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from .errors import StoreFailure
from .policies.gates import DEFAULT_GATES
from .versions import Codes


@dataclass
class WorkerConfig:
    owner: str
    lease_seconds: float = 10.0
    slice_seconds: float = 5.0
    crash_loop_limit: int = 3
    # Asked before every new call (runs/durable/policies/gates.py): budgets, approvals.
    gates: tuple = DEFAULT_GATES
    # price(model, prompt_tokens, completion_tokens) -> dollars, for metered calls
    # (runs/durable/policies/metering.py); None: usage is counted in tokens, at no cost.
    price: Callable[[str, int, int], float] | None = None
    # launched(run_id): a child run was launched (docs/children.md); the runtime hands
    # it to a worker at once instead of waiting for the sweep.
    launched: Callable[[str], None] | None = None
    # The runs of which code this worker claims (runs/durable/versions.py); None: any.
    codes: Codes | None = None
    # thread_ended(): called by every thread the engine starts (a LeaseRenewer, the calls
    # of a ctx.parallel group) as it ends. A store whose connections are per thread
    # closes the thread's here (runs/storage: `OrmStore.close_thread_resources`, Django's
    # connections being per thread); None: nothing to close (MemoryStore).
    thread_ended: Callable[[], None] | None = None
    # before_tool(): called on a call's thread right before each attempt of its tool,
    # its gates asked. A worker whose threads share a pool of database connections hands
    # the thread's back here (runs/worker/db.py): a gate that read the database left it
    # checked out, and a run must not hold one while its tool waits (1,000 runs whose
    # model calls take a second each, on a pool of 10, made 10 calls a second).
    before_tool: Callable[[], None] | None = None
    # What the worker's database raises when it fails (a terminated connection, a
    # restart), met by the deployment's code on the engine's side of a step: a gate
    # reading its policies or the run, the price table. That is the store failing, not
    # the agent: the session ends as on any store failure and the run is taken back
    # (StoreFailure), where the step failed the run with the call just made unlogged.
    # The agent's and its tools' own errors are never looked at; (): none known.
    store_faults: tuple[type[BaseException], ...] = ()


@contextlib.contextmanager
def store_faults_end_the_session(config: WorkerConfig):
    """Around the deployment's code that a step runs for the engine (gates, price):
    one of `config.store_faults` out of it is a StoreFailure."""
    try:
        yield
    except config.store_faults as exc:
        raise StoreFailure() from exc


def thread_ended(config: WorkerConfig) -> None:
    """A thread of the engine's own ends (WorkerConfig.thread_ended)."""
    if config.thread_ended is not None:
        config.thread_ended()
