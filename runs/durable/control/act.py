"""How every operator action commits: read the run, decide, commit under the epoch and the
status read, with one audit entry and one `audit` event; decide again if a worker moved
the run meanwhile."""

from __future__ import annotations

from collections.abc import Callable

from .. import events, observe
from .. import records as r
from ..errors import FencedError

ATTEMPTS = 5
SUMMARY = ("status", "branch", "step_no", "control", "agent_version")


def act(store, run_id: str, action: str, actor: str, reason: str,
        decide: Callable[[r.RunRecord], r.OperatorCommit],
        details: dict | None = None) -> r.RunRecord:
    """`decide(run)`: the action's commit on the run as read (or an error: nothing is
    written). Returns the run as committed."""
    for _ in range(ATTEMPTS):
        run = store.get(run_id)
        commit = decide(run)
        changed = commit.run.fields()
        after = {**summary(run), **{k: v for k, v in changed.items() if k in SUMMARY}}
        commit.audit = r.AuditRecord(actor=actor, action=action, reason=reason,
                                     before=summary(run), after={**after, **(details or {})})
        commit.events.append(events.audit(action, actor, reason, **(details or {})))
        commit.expect_status = run.status
        if commit.take_over:
            # The old owner is fenced off by the new epoch; its lease means nothing now.
            commit.release = True
        try:
            result = store.commit(run_id, run.epoch, commit)
        except FencedError:
            continue  # a worker claimed or released it meanwhile: decide again on fresh state
        observe.current().acted(action, result.run)
        return result.run
    raise FencedError(run_id, -1)


def summary(run: r.RunRecord) -> dict:
    return {name: getattr(run, name) for name in SUMMARY}
