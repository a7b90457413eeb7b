"""What a step of a chat run stores on PostgreSQL: a history growing by one ~500-byte
message a step writes a checkpoint row (a patch: runs/durable/serde.py) and its event,
with their index entries. Measured as the growth of the tables' relations (heap, TOAST
and indexes), after a first run filled their first pages.

PostgreSQL only: relation sizes."""

from __future__ import annotations

import math
import random

import pytest
from django.db import connection

from runs.durable import (
    Agent,
    AgentRegistry,
    Done,
    WorkerConfig,
    agent,
    control,
    execute_run,
    serde,
)
from runs.models import Checkpoint
from runs.storage import database_store, sizes

pytestmark = pytest.mark.django_db  # PostgreSQL only: tests/conftest.py

REG = AgentRegistry()
STEPS = 200
TABLES = ["runs_checkpoint", "runs_runevent"]
# Measured 860 B a step (every time, as bench/compare's scenario 3), 1,106-1,311 with
# each patch chain only as heavy as its full checkpoint (serde.CHAIN_WEIGHT 1, measured
# otherwise): the checkpoint's row and index entries, and its event's (a row of 125 B
# and two index entries, 250-290 B in all).
BOUND = 1_000
WORDS = ("agent", "tool", "call", "result", "state", "plan", "step", "memory", "search",
         "page", "fetch", "summary", "user", "answer")


def message(n: int) -> dict:
    """About 500 bytes of word-like text, compressing as prose does."""
    rng = random.Random(n)
    words = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(60))
    return {"role": "assistant" if n % 2 else "user", "content": words[:500]}


@agent("chat_history", registry=REG)
class ChatHistory(Agent):
    def start(self, inputs):
        return {"n": inputs["n"], "messages": []}

    def step(self, ctx, state):
        state["messages"].append(message(len(state["messages"])))
        if len(state["messages"]) >= state["n"]:
            return Done({"messages": len(state["messages"])})
        return state


def chat_run(steps: int) -> str:
    store = database_store()
    run = control.launch(store, agent="chat_history", inputs={"n": steps}, registry=REG)
    config = WorkerConfig(owner="h:1:t", lease_seconds=1000, slice_seconds=math.inf)
    assert execute_run(store, run.id, config, registry=REG) == "succeeded"
    return run.id


def stored(steps: int) -> tuple[int, str]:
    """The bytes a chat run of `steps` steps stores, alone in emptied tables (in the
    test's transaction), and its id. Alone: the indexes lead with the run's id, and a
    run whose random id sorts among another's splits their pages in the middle, half
    full, where one alone appends (one run measured after another took 20 or 24 pages,
    as the two ids fell: 819 or 983 B a step, and CI once 1,024)."""
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)}")
    before = sizes.table_bytes(TABLES)
    run_id = chat_run(steps)
    return sizes.table_bytes(TABLES) - before, run_id


def test_a_chat_step_stores_about_twice_its_message():
    """As bench/compare's scenario 3 measures it: a run of 2 + STEPS steps minus one of 2,
    so that what any run costs once (its first pages, its first snapshot) is left out."""
    base, _ = stored(2)
    grown, run_id = stored(2 + STEPS)
    per_step = (grown - base) / STEPS
    assert per_step <= BOUND, per_step
    # and what it stores is the run's every state
    checkpoints = list(Checkpoint.objects.filter(run_id=run_id).order_by("number"))
    assert sum(c.codec == serde.PATCH_CODEC for c in checkpoints) > STEPS * 0.9
    for c in checkpoints[::37] + checkpoints[-1:]:
        assert c.state()["messages"] == [message(k) for k in range(c.step_no)]



@agent("counter_steps", registry=REG)
class CounterSteps(Agent):
    def start(self, inputs):
        return {"n": inputs["n"], "i": 0}

    def step(self, ctx, state):
        state["i"] += 1
        return Done({"i": state["i"]}) if state["i"] >= state["n"] else state


def test_a_runs_new_checkpoints_fill_the_pages_of_the_latest_checkpoint_index():
    """checkpoint_latest is read backwards and written at the right end of a run's range
    (runs/models.py): when that is the index's right end (the newest run, as in `bench
    compare`), a split there leaves the left page 90% full. Written at the left end (the
    index descending, as it was), each split left two half-full pages, wherever the run.
    The table is emptied inside the test's transaction (rolled back after it): checkpoints
    of other tests' runs, or free space the flushes after them left in the table, would
    put this run's entries in the middle of the index (CI measured 54%)."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")  # Debian's postgresql
        cursor.execute("TRUNCATE runs_checkpoint")
    store = database_store()
    run = control.launch(store, agent="counter_steps", inputs={"n": 1_500}, registry=REG)
    config = WorkerConfig(owner="h:1:t", lease_seconds=1000, slice_seconds=math.inf)
    assert execute_run(store, run.id, config, registry=REG) == "succeeded"
    with connection.cursor() as cursor:
        cursor.execute("SELECT leaf_pages, avg_leaf_density FROM pgstatindex('checkpoint_latest')")
        leaf_pages, density = cursor.fetchone()
    assert leaf_pages >= 10  # enough splits to tell (1,500 entries of 56 B)
    assert density > 70, density  # measured 83 (descending: 51)
