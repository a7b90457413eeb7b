"""Scenario 5: a run killed at k of 2k steps; time from the restart to the first new
effect. agentops: execute_run's claim to the first new tool call. DBOS: its recovery
of a workflow with k completed steps (the workflow re-executes from its start and
replays every recorded step before it reaches a new one)."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time

from bench.compare.runner import Bench
from bench.compare.stats import Row


def resume(b: Bench) -> None:
    """Every history is written first; then each repetition resumes DBOS's workflow and
    agentops' run at every size in turn, so a noisy moment hits all of them alike."""
    from bench.compare import ours

    sizes, first = b.sizes.resume_sizes, b.sizes.resume_sizes[0]
    crashed = {}
    for size in sizes:
        t0 = time.perf_counter()
        crashed[size] = ours.CrashedRun(size, 2 * size)
        b.log(f"5: wrote the history of a crashed agentops run of {size:,} steps "
              f"({time.perf_counter() - t0:.1f} s)")
    peers = {size: DbosCrashed(b.url, size, 2 * size) for size in b.sizes.dbos_resume_sizes}
    b.log(f"5: crashed DBOS workflows, their logs padded to {', '.join(map(str, peers))} steps")
    s = b.repeat("5", lambda _: _one(crashed, peers))
    for run in crashed.values():
        run.delete()
    for size in sizes:
        title = f"resume at {size:,} of {2 * size:,} steps"
        if size in peers:
            b.rows.append(Row(
                "5", title, "restart to first new effect", "ms", s[f"ours {size}"],
                s[f"dbos {size}"], "DBOS", 0.1, False, "<= 0.1x DBOS",
                "agentops: claim to first new effect (median of 5 a repetition); DBOS: "
                "workflow entry after recovery to first new step (from the recover() call: "
                f"{s[f'dbos total {size}'].median:.0f} ms)"))
        if size != first:
            b.rows.append(Row("5", title, "restart to first new effect", "ms", s[f"ours {size}"],
                              s[f"ours {first}"], f"agentops at {first:,}", 1.5, False,
                              f"flat: <= 1.5x at {first:,}"))


def _one(crashed: dict, peers: dict):
    from bench.compare import dbos_peer

    values, parts = {}, []
    for size, run in crashed.items():
        if size in peers:
            with dbos_peer.running(peers[size].url):
                entered, total = peers[size].resume()
            peers[size].reset()
            values.update({f"dbos {size}": entered * 1e3, f"dbos total {size}": total * 1e3})
            parts.append(f"DBOS at {size:,} {entered * 1e3:.0f} ms "
                         f"(from recover(): {total * 1e3:.0f} ms)")
        times = []
        for _ in range(5):
            times.append(run.resume() * 1e3)
            run.reset()
        values[f"ours {size}"] = statistics.median(times)
        parts.append(f"agentops at {size:,} {values[f'ours {size}']:.1f} ms")
    return values, "; ".join(parts)


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
