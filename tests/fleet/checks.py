"""What a fleet test reads of its outcome: the runs, their writers, the outside world."""

from collections import Counter

from runs.models import Checkpoint, Effect, RunEvent
from tests.crash.helpers import assert_consistent, assert_outside_world_clean, wait_final


def writers(run_id: str) -> set[str]:
    """The hosts whose workers wrote the run's effects (an owner is host:pid:token)."""
    return {w.split(":")[0] for w in Effect.objects.filter(run_id=run_id)
            .values_list("worker", flat=True) if w}


# timeout: the runs' units on hosts that reach PostgreSQL through PgBouncer on the bridge,
# a lost host's runs once their 2 s leases run out, on CI's two cores
def assert_each_unit_once(run_ids: list[str], steps: int, timeout: float = 90) -> dict:
    """Every run succeeded with the output of an uninterrupted one; no duplicate event,
    effect, checkpoint or downstream write. Returns the runs."""
    runs = wait_final(run_ids, timeout=timeout, resolve_in_doubt=False)
    for run in runs.values():
        assert (run.status, run.output) == ("succeeded", {"units": steps}), \
            (run.id, run.status, run.error, run.attention)
        assert_consistent(run)  # events contiguous from 1, no live effect off the lineage
        logged = Counter(e.data.get("message") for e in RunEvent.objects.filter(
            run_id=run.id, kind="log"))
        assert all(n == 1 for n in logged.values()), f"an event written twice: {logged}"
        live = Counter(Effect.objects.filter(run_id=run.id, superseded=False)
                       .values_list("branch", "step_no", "seq"))
        assert all(n == 1 for n in live.values()), f"an effect written twice: {live}"
        numbers = Counter(Checkpoint.objects.filter(run_id=run.id)
                          .values_list("number", flat=True))
        assert all(n == 1 for n in numbers.values()), f"a checkpoint written twice: {numbers}"
    per_unit = assert_outside_world_clean(run_ids)  # once per unit, one notification each
    assert len(per_unit) == len(run_ids) * steps
    return runs
