"""Findings of the chaos suite, each replayed deterministically (docs/RELIABILITY.md).

A finding stays here as a strict xfail until it is fixed (the fix turns it into an
unexpected pass, which fails the suite until the mark is removed), then as the
regression test of its fix.
"""

import pytest

from runs import services
from runs.models import Effect, Run
from sandbox.models import Record
from tests.crash.helpers import wait_final
from tests.support.processes import wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_a_write_cut_off_by_a_crash_is_logged_even_when_the_run_is_then_cancelled(
        server, start_cluster, faults_dir):
    env = {"AGENTOPS_SANDBOX_URL": f"{server.url}/sandbox"}
    cluster = start_cluster(workers=1, **env)
    run = services.run_launch(user=None, agent="steps",
                              inputs={"steps": 6, "delay": 0.05, "notify": False})
    wait_until(lambda: Run.objects.get(pk=run.id).step_no >= 2, 30, message="two steps")
    (faults_dir / "after_effect_before_log").write_text("kill@post_record")
    wait_until(lambda: list(faults_dir.glob("after_effect_before_log.fired.*")), 30,
               message="the worker to die between the call and its log")
    cluster.stop()  # nobody claims the run before the cancel lands
    services.run_cancel(run_id=run.id, user="ops", reason="changed my mind")
    start_cluster(workers=1, name="again", **env)
    final = wait_final([run.id])[run.id]
    assert final.status == "cancelled"
    written = set(Record.objects.filter(key__startswith=f"{run.id}:")
                  .values_list("key", flat=True))
    logged = set(Effect.objects.filter(run_id=run.id, tool__endswith="post_record")
                 .values_list("key", flat=True))
    assert written <= logged, f"written downstream, never logged: {sorted(written - logged)}"
