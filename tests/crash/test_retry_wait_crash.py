"""A worker SIGKILLed at `before_retry_wait`: a call failed (the sandbox is gone) and the
worker dies before its durable retry wait is written. Nothing of that attempt was logged,
so the next worker replays the step and calls again under the same key; it fails too and
waits on a durable timer; once the sandbox is back the run finishes with every unit of
work downstream exactly once."""

import signal

import pytest

from runs import services
from runs.models import Run, RunEvent
from tests.crash.helpers import assert_consistent, assert_outside_world_clean, wait_final
from tests.support.processes import RUNS_END_DEADLINE, TREE_DEADLINE, Server, free_port, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

STEPS = 8


def retry_waits(run_id: str) -> int:
    return RunEvent.objects.filter(run_id=run_id, kind="status", data__kind="retry").count()


def test_sigkill_before_the_retry_wait_is_written(tmp_path, start_cluster, faults_dir):
    port = free_port()
    sandbox = Server(tmp_path, port=port)
    try:
        url = f"{sandbox.url}/sandbox"
        start_cluster(workers=2, AGENTOPS_LEASE_SECONDS=2, AGENTOPS_SANDBOX_URL=url)
        run_id = services.run_launch(user=None, agent="steps", inputs={
            "steps": STEPS, "delay": 0.05, "notify": False}).id
        wait_until(lambda: Run.objects.get(pk=run_id).step_no >= 2, 30, message="two steps")
        (faults_dir / "before_retry_wait").write_text("kill@post_record")
        sandbox.signal_group(signal.SIGKILL)  # post_record fails until it is back
        sandbox.stop()
        [fired] = wait_until(lambda: list(faults_dir.glob("before_retry_wait.fired.*")), 30,
                             message="the worker to die before its retry wait is written")
        killed_pid = int(fired.name.rsplit(".", 1)[1])
        assert retry_waits(run_id) == 0  # it died before writing the wait
        # Another worker takes the run over and writes the wait the dead one could not.
        wait_until(lambda: retry_waits(run_id) >= 1, TREE_DEADLINE, message="a durable retry wait")
        resumed = RunEvent.objects.filter(run_id=run_id, kind="status", data__after="crash")
        assert resumed.exists() and all(
            e.data["worker"].split(":")[1] != str(killed_pid) for e in resumed)
        sandbox = Server(tmp_path, port=port)  # back, at the same address
        run = wait_final([run_id], timeout=RUNS_END_DEADLINE)[run_id]
    finally:
        sandbox.stop()
    assert run.status == "succeeded", (run.status, run.error, run.attention)
    assert run.output == {"units": STEPS, "total": STEPS * (STEPS - 1) // 2}
    assert_consistent(run)
    assert len(assert_outside_world_clean([run_id])) == STEPS
