"""A run with a long history written straight into the tables (no agent executes):
for tests and benchmarks of what an operator action reads on runs of any length."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from runs.durable.serde import encode_state
from runs.models import Checkpoint, Effect, Run

EFFECTS_PER_STEP = 2  # like the ledger agent: an idempotent write and a charge
BATCH = 5000


def give_history(run: Run, effects: int, *, status: str = "running") -> Run:
    """Give `run` `effects` done calls (EFFECTS_PER_STEP a step, the second of each not
    idempotent) on branch 1 and a checkpoint after every step. A running run gets a
    live lease of a worker that never writes, so pause and cancel are requests."""
    steps = effects // EFFECTS_PER_STEP
    start = datetime.now(dt_timezone.utc) - timedelta(seconds=effects)
    blob, codec = encode_state({"entries": steps, "total": steps})
    for first in range(0, effects, BATCH):
        Effect.objects.bulk_create([_effect(run.pk, i, start) for i in
                                    range(first, min(effects, first + BATCH))])
    for first in range(1, steps + 1, BATCH):
        Checkpoint.objects.bulk_create([
            Checkpoint(run_id=run.pk, number=n, branch=1, step_no=n, codec=codec, blob=blob,
                       size=len(blob), created_at=start + timedelta(seconds=n))
            for n in range(first, min(steps, first + BATCH - 1) + 1)])
    leased = status == "running"
    Run.objects.filter(pk=run.pk).update(
        status=status, step_no=steps, checkpoint_count=steps, epoch=1,
        lease_owner="elsewhere:1:never-writes" if leased else None,
        lease_expires_at=start + timedelta(days=1) if leased else None)
    run.refresh_from_db()
    return run


def _effect(run_id: str, i: int, start: datetime) -> Effect:
    step, seq = i // EFFECTS_PER_STEP + 1, i % EFFECTS_PER_STEP
    idempotent = seq == 0
    tool = "ledger.write_entry" if idempotent else "ledger.charge"
    at = start + timedelta(seconds=i)
    return Effect(run_id=run_id, branch=1, step_no=step, seq=seq, kind="call", tool=tool,
                  digest=f"{i:032x}", key=f"{run_id}:1:{step}:{seq}", idempotent=idempotent,
                  status="done", args_preview=f"{step}", result={"ok": step}, attempts=1,
                  started_at=at, finished_at=at + timedelta(milliseconds=5), epoch=1)
