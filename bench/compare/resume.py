"""Scenario 5: a run killed at k of 2k steps; time from the restart to the first new
effect. agentops: execute_run's claim to the first new tool call. DBOS: its recovery
of a workflow with k completed steps (the workflow re-executes from its start and
replays every recorded step before it reaches a new one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bench.compare.runner import Bench
from bench.compare.stats import Row


def resume(b: Bench) -> None:
    from bench.compare import ours

    results, first = {}, b.sizes.resume_sizes[0]
    for size in b.sizes.resume_sizes:
        t0 = time.perf_counter()
        crashed = ours.CrashedRun(size, 2 * size)
        b.log(f"5: wrote the history of a crashed agentops run of {size:,} steps "
              f"({time.perf_counter() - t0:.1f} s)")
        peer = None
        if size in b.sizes.dbos_resume_sizes:
            peer = DbosCrashed(b.url, size, 2 * size)
            b.log(f"5: crashed a DBOS workflow, its log padded to {size:,} steps")
        results[size] = b.repeat(f"5 at {size:,}", lambda _, c=crashed, p=peer: _one(c, p))
        crashed.delete()
    for size, s in results.items():
        title = f"resume at {size:,} of {2 * size:,} steps"
        if "dbos" in s:
            b.rows.append(Row(
                "5", title, "restart to first new effect", "ms", s["ours"], s["dbos"], "DBOS",
                0.1, False, "<= 0.1x DBOS",
                "agentops: claim to first new effect; DBOS: workflow entry after recovery to "
                f"first new step (from the recover() call: {s['dbos_total'].median:.0f} ms)"))
        if size != first:
            b.rows.append(Row("5", title, "restart to first new effect", "ms", s["ours"],
                              results[first]["ours"], f"agentops at {first:,}", 1.5, False,
                              f"flat: <= 1.5x at {first:,}"))


def _one(crashed, peer):
    ours_ms = crashed.resume() * 1e3
    crashed.reset()
    values, message = {"ours": ours_ms}, f"agentops {ours_ms:.1f} ms"
    if peer is not None:
        entered, total = peer.resume()
        peer.reset()
        values.update(dbos=entered * 1e3, dbos_total=total * 1e3)
        message += f", DBOS {entered * 1e3:.0f} ms (from recover(): {total * 1e3:.0f} ms)"
    return values, message


class DbosCrashed:
    """A DBOS workflow SIGKILLed in a child process while its 4th step runs, its step
    log then padded to `done` steps (copies of a real step row), put back after each
    recovery."""

    BLOCK_AT = 3

    def __init__(self, url: str, done: int, total: int):
        from bench.compare import dbos_peer

        self.url, self.done = url, done
        self.id = dbos_peer.new_id("resume")
        self._crash(total)
        self._pad()

    def _crash(self, total: int) -> None:
        import psycopg

        env = dict(os.environ, BENCH_DBOS_BLOCK_AT=str(self.BLOCK_AT))
        child = subprocess.Popen([sys.executable, "-m", "bench.compare.dbos_peer", "crash",
                                  self.url, self.id, str(total)], env=env,
                                 start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            with psycopg.connect(self.url, autocommit=True) as conn:
                while conn.execute("SELECT count(*) FROM dbos.operation_outputs "
                                   "WHERE workflow_uuid = %s", [self.id]).fetchone()[0] \
                        < self.BLOCK_AT:
                    if child.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the DBOS child did not reach its blocking step")
                    time.sleep(0.05)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()

    def _pad(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("""
                INSERT INTO dbos.operation_outputs (workflow_uuid, function_id, function_name,
                    output, error, child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms,
                    serialization, application_name)
                SELECT workflow_uuid, g, function_name, output, error, child_workflow_id,
                       started_at_epoch_ms, completed_at_epoch_ms, serialization,
                       application_name
                FROM dbos.operation_outputs, generate_series(%s::int, %s::int) g
                WHERE workflow_uuid = %s AND function_id = 1""",
                         [self.BLOCK_AT + 1, self.done, self.id])
            conn.execute("ANALYZE dbos.operation_outputs")
            self.saved = conn.execute("SELECT row_to_json(w)::text FROM dbos.workflow_status w "
                                      "WHERE workflow_uuid = %s", [self.id]).fetchone()[0]

    def resume(self) -> tuple[float, float]:
        """(workflow entry to first new step, recover() call to first new step), seconds."""
        from dbos import DBOS

        from bench.compare import dbos_peer

        state = dbos_peer.RESUME
        state.update(entered=None, first_new=None, **{"from": self.done})
        state["stop"].set()
        start = time.perf_counter()
        handles = DBOS._recover_pending_workflows(["crashed"])
        if len(handles) != 1:
            raise RuntimeError(f"DBOS recovered {len(handles)} workflows, expected 1")
        handles[0].get_result(polling_interval_sec=0.05)
        if state["first_new"] is None:
            raise RuntimeError("the recovered DBOS workflow made no new step")
        return state["first_new"] - state["entered"], state["first_new"] - start

    def reset(self) -> None:
        """Back to the moment of the crash: no new steps, the workflow PENDING on the dead
        executor, every column of its status row as it was."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("DELETE FROM dbos.operation_outputs WHERE workflow_uuid = %s "
                         "AND function_id > %s", [self.id, self.done])
            conn.execute("DELETE FROM dbos.workflow_output WHERE workflow_uuid = %s", [self.id])
            cols = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'dbos' "
                "AND table_name = 'workflow_status' AND column_name <> 'workflow_uuid'")]
            names = ", ".join(cols)
            conn.execute(f"UPDATE dbos.workflow_status SET ({names}) = (SELECT {names} FROM "
                         "json_populate_record(NULL::dbos.workflow_status, %s::json)) "
                         "WHERE workflow_uuid = %s", [self.saved, self.id])
