"""The supervisor's frozen-main check and a main that is slow to start.

A main that has not reported yet is starting (imports, forking its tree): on a loaded
machine that takes longer than a short AGENTOPS_MAIN_STALE, and killing it then kills
every main before it gets going. The stale limit applies from its first report on.
The child here is a stand-in main: it reports (touches the progress file) when told to
by a file the test creates, so the test decides when "starting" ends.
"""

import os
import sys

from runs.worker.cluster.supervisor import Supervisor
from tests.support.processes import wait_until

STAND_IN_MAIN = """
import os, pathlib, sys, time
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.02)
pathlib.Path(os.environ["AGENTOPS_PROGRESS_FILE"]).touch()  # one report, then silence
time.sleep(600)
"""


def test_a_slow_start_is_not_taken_for_a_frozen_main_but_silence_after_a_report_is(tmp_path):
    go = tmp_path / "go"
    supervisor = Supervisor([sys.executable, "-c", STAND_IN_MAIN, str(go)],
                            stale_seconds=0.2, grace_seconds=1, start_seconds=600)
    supervisor.start()
    child = supervisor.child
    try:
        # Starting for many stale periods (its start moved back in time, not waited
        # for): a tick leaves it alone.
        supervisor.started_wall -= 5
        supervisor.tick()
        assert child.poll() is None, "a starting main was killed as frozen"
        go.touch()
        wait_until(supervisor.reported, 30, message="the stand-in main's first report")
        # Reported once, then silent past the stale limit (its report moved back in
        # time): frozen, its group killed.
        reported_at = supervisor.progress.stat().st_mtime - 5
        os.utime(supervisor.progress, (reported_at, reported_at))
        supervisor.tick()
        wait_until(lambda: child.poll() is not None, 30, message="the silent main to be killed")
    finally:
        supervisor.end_groups(force=True)
        supervisor.progress.unlink(missing_ok=True)
        if child.poll() is None:
            child.kill()
