"""The rule that links a parent run and its children (docs/children.md), for every store.

A parent that waits on children (ctx.wait, ctx.wait_all, or a spawn held by its cap)
is `waiting` with the attention {"kind": "children", "pending": [child ids]} and no
lease. It is woken (its timer made due, so that the sweep hands it out) in the one
place where a run's status becomes final: the store's commit. Two commits race, and
each side checks the other under the parent row's lock:

  * a child's final commit locks its parent's row and wakes it if the parent waits
    on that child (`wakes`);
  * the parent's own waiting commit, once its row is locked, looks at the children it
    waits on and wakes itself if one of them is already final (`woken_at_once`): it
    finished between the step's look and this commit.

Whichever commits second sees the first, so no wake-up is lost. A safety timer on
every such wait (`RECHECK_SECONDS`) would catch a lost one anyway.
"""

from __future__ import annotations

from . import records as r

WAITING_FOR = "children"
# The longest a parent waits on children without looking again: a safety net only.
RECHECK_SECONDS = 300.0


def pending(attention: dict | None) -> list[str]:
    """The children a waiting parent waits on (none if it waits on something else)."""
    if not attention or attention.get("kind") != WAITING_FOR:
        return []
    return list(attention.get("pending") or [])


def wakes(parent_status: str, parent_attention: dict | None, child_id: str) -> bool:
    """Does `child_id` reaching a final status wake this parent?"""
    return parent_status == r.WAITING and child_id in pending(parent_attention)


def woken_at_once(attention: dict | None, final: set[str]) -> bool:
    """A parent committing its wait: is one of the children it waits on (`final`: those
    of them the store found final) already done?"""
    return bool(set(pending(attention)) & final)


def spawned_at(child: r.RunRecord) -> tuple[int, int]:
    """(branch, step_no) of the parent's spawn that launched `child`: its spawn key is
    that effect's idempotency key, run:branch:step:seq (runs/durable/step.py)."""
    if not child.spawn_key:
        return -1, -1
    _, branch, step_no, _ = child.spawn_key.rsplit(":", 3)
    return int(branch), int(step_no)


def is_family_commit(commit: r.Commit, run: r.RunRecord) -> bool:
    """Does this commit of `run` need the family rule: it ends a child, or the run waits
    on children?"""
    status = commit.run.get("status")
    return ((status in r.FINAL_STATUSES and run.parent_id is not None)
            or (status == r.WAITING and bool(pending(commit.run.get("attention")))))
