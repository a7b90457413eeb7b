"""The migrate agent on real workers: copy, verify, cut over; kills and an in-doubt cut-over."""

import pytest

from runs.models import Run
from sandbox import dataset
from sandbox.models import KeyCall, Notification, Record
from tests.agents.helpers import (
    assert_nothing_reached_the_target_twice,
    cluster_env,
    kill_holder,
    killed_runs_resumed,
    launch,
    wait_final,
)
from tests.support.processes import TREE_DEADLINE, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROWS, BATCH = 5000, 50


def migrate_inputs(server) -> dict:
    return {"source_url": f"{server.url}/sandbox/dataset/rows",
            "target_url": f"{server.url}/sandbox/api", "rows": ROWS, "batch_size": BATCH}


def expected_output() -> dict:
    source = dataset.source_rows(0, ROWS, total=ROWS)
    target = dataset.checksum(dataset.transform(row) for row in source)
    return {"rows": ROWS, "batches": ROWS // BATCH, "source_checksum": dataset.checksum(source),
            "checksum": target, "cut_over": True,
            "verified": {"records": ROWS // BATCH, "rows": ROWS, "checksum": target,
                         "duplicate_units": []}}


def cutover_unit(run_id: str) -> str:
    return f"{run_id}-cutover"


def assert_target_holds_the_migration(run_id: str) -> None:
    per_unit = assert_nothing_reached_the_target_twice(run_id)
    assert len(per_unit) == ROWS // BATCH  # every batch arrived, once
    rows = [row for payload in Record.objects.filter(unit__startswith=f"{run_id}-batch-")
            .values_list("payload", flat=True) for row in payload["rows"]]
    assert dataset.checksum(rows) == expected_output()["checksum"]
    assert Notification.objects.filter(unit=cutover_unit(run_id)).count() == 1


def test_migration_verifies_and_cuts_over_once_through_sigkills(server, start_cluster,
                                                                 faults_dir):
    cluster = start_cluster(workers=2, **cluster_env(server))
    reference = launch("migrate", migrate_inputs(server))
    uninterrupted = wait_final([reference])[reference]
    assert uninterrupted.output == expected_output()
    assert_target_holds_the_migration(reference)

    victim = launch("migrate", migrate_inputs(server))
    kill_holder(victim, cluster, [lambda run: run.step_no >= 15,
                                  lambda run: run.step_no >= 40,
                                  lambda run: run.step_no >= 65])
    # The fourth death comes in the cut-over: the notification is sent, its result is
    # not logged. It is not idempotent, so the run asks an operator instead of resending.
    (faults_dir / "after_effect_before_log").write_text("kill@dataset.notify")
    wait_until(lambda: Run.objects.get(pk=victim).status == "needs_attention", TREE_DEADLINE,
               message="the in-doubt cut-over")
    attention = Run.objects.get(pk=victim).attention
    assert attention["kind"] == "in_doubt" and attention["tool"].endswith("dataset.notify")
    assert Notification.objects.filter(unit=cutover_unit(victim)).count() == 1  # it happened

    run = wait_final([victim], in_doubt_unit=cutover_unit)[victim]
    assert run.output == uninterrupted.output
    killed_runs_resumed(victim, 4)
    assert_target_holds_the_migration(victim)
    assert run.audit_entries.filter(action="resolve").count() == 1
    # A batch sent again after a kill went under the same key, with the same body: the
    # target answered it from the stored response (or 409 while the first was in flight).
    for call in KeyCall.objects.filter(key__startswith=f"{victim}:", calls__gt=1):
        assert call.mismatches == 0 and call.replays + call.conflicts == call.calls - 1, call
