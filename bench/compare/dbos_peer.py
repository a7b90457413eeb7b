"""DBOS Transact, the peer of scenarios 1, 2, 5 and 6: the same programs as
bench/compare/agents.py, as DBOS workflows of @DBOS.step()s.

DBOS keeps its system tables in schema `dbos` of the bench database. Its
defaults are kept, except the queue's polling interval, set to django-q2's
(0.1 s) so that neither side waits longer to notice new work.

Also a child-process entry point, for what must happen in a process of its own:

    python -m bench.compare.dbos_peer crash URL WORKFLOW_ID STEPS BLOCK_AT
        start a workflow whose step BLOCK_AT never returns (the parent SIGKILLs it)
    python -m bench.compare.dbos_peer llm URL
        scenario 6: execute the workflows the bench enqueued on the "bench-llm" queue
        (no concurrency limit), after saying "launched"
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid

from dbos import DBOS, SetWorkflowID

SCHEMA = "dbos"
APP_VERSION = "bench-1"  # the same in every process, so a crashed workflow is recoverable
QUEUE = "bench"          # scenario 2, in the bench process
LLM_QUEUE = "bench-llm"  # scenario 6, in a child process
POLL = 0.1

# Scenario 5: the bench reads these after a recovery.
RESUME = {"entered": None, "first_new": None, "from": None, "stop": threading.Event()}
_block_at = int(os.environ.get("BENCH_DBOS_BLOCK_AT", "-1"))


@DBOS.step()
def noop(i: int) -> int:
    return i


@DBOS.workflow()
def steps_workflow(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


@DBOS.workflow()
def small_workflow(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


@DBOS.step()
def resume_step(i: int) -> int:
    if 0 <= _block_at <= i:  # the child "crashes" here: it blocks until SIGKILL
        time.sleep(3600)
    if RESUME["first_new"] is None and RESUME["from"] is not None and i >= RESUME["from"]:
        RESUME["first_new"] = time.perf_counter()
    return i


@DBOS.workflow()
def resume_workflow(n: int) -> int:
    RESUME["entered"] = time.perf_counter()
    for i in range(n):
        resume_step(i)
        if RESUME["first_new"] is not None and RESUME["stop"].is_set():
            return i  # the bench has its measure: stop here rather than run 5,000 more
    return n


@DBOS.step()
def llm_step(i: int, seconds: float) -> int:
    time.sleep(seconds)
    return i


@DBOS.workflow()
def llm_workflow(n: int, seconds: float) -> int:
    for i in range(n):
        llm_step(i, seconds)
    return n


def launch(url: str, executor_id: str = "bench", queues: tuple[str, ...] = (QUEUE,)) -> None:
    """Start DBOS in this process. A DBOS process dequeues from every queue it listens
    to (by default all the application's queues): each of ours listens to its own."""
    DBOS(config={"name": "agentops-bench", "system_database_url": url,
                 "dbos_system_schema": SCHEMA, "log_level": "ERROR",
                 "executor_id": executor_id, "application_version": APP_VERSION})
    DBOS.listen_queues(list(queues))
    DBOS.launch()


def queue(name: str = QUEUE):
    return DBOS.register_queue(name, polling_interval_sec=POLL)


def destroy() -> None:
    DBOS.destroy(destroy_registry=False)


@contextlib.contextmanager
def running(url: str):
    """DBOS launched in this process for the peer's part of a repetition only.

    A launched DBOS keeps background threads busy (its queue poller, ten times a
    second, among others): left running, they took the CPU and the GIL from agentops'
    in-process measurements (scenario 1: 0.53 against 0.45 ms an effect). Each side
    is measured with the other one idle. Launching takes ~0.05 s, outside any timing."""
    before = threading.active_count()
    launch(url)
    try:
        yield
    finally:
        destroy()
        deadline = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.01)  # its threads end a little after destroy() returns


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- scenario 1: a workflow of n no-op steps ----------------------------------------------
def run_steps(n: int) -> float:
    """Seconds for one workflow of n no-op steps, from start to its recorded output."""
    start = time.perf_counter()
    with SetWorkflowID(new_id("steps")):
        assert steps_workflow(n) == n
    return time.perf_counter() - start


# --- scenario 2: many small workflows through a queue --------------------------------------
def run_many(q, runs: int, steps: int) -> list[str]:
    handles = [q.enqueue(small_workflow, steps) for _ in range(runs)]
    for handle in handles:
        handle.get_result(polling_interval_sec=0.05)
    return [h.get_workflow_id() for h in handles]


# --- child processes -------------------------------------------------------------------------
def _child_crash(url: str, workflow_id: str, steps: int) -> None:
    launch(url, executor_id="crashed", queues=())
    with SetWorkflowID(workflow_id):
        DBOS.start_workflow(resume_workflow, steps)
    time.sleep(3600)


def enqueue_llm(runs: int, steps: int, seconds: float) -> None:
    """Scenario 6, in the bench process: enqueue on a queue only the child listens to."""
    q = queue(LLM_QUEUE)
    for _ in range(runs):
        q.enqueue(llm_workflow, steps, seconds)


def _child_llm(url: str) -> None:
    launch(url, executor_id="llm", queues=(LLM_QUEUE,))
    queue(LLM_QUEUE)
    print("launched", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "crash":
        _child_crash(url, rest[0], int(rest[1]))
    elif command == "llm":
        _child_llm(url)
    else:
        raise SystemExit(f"unknown command {command}")
