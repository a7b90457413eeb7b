"""Launch and operator actions, on any Store: the operators' API of the engine.

Each action reads the run, decides, and commits conditionally on the epoch it
read; if a worker claimed the run in between (FencedError), it reads again
(`act.act`). An action reads the run row and only the part of its history it
changes (a HistoryQuery), never the whole log: a pause costs the same on a run of a
hundred effects as on one of a hundred thousand. Actions that rewrite a run's course
(rollback, resolve, edit, upgrade, and stopping a run that no worker holds) take the
run over: the epoch moves on, so a worker still holding the old epoch can write
nothing more.

  lifecycle.py  launch, pause, resume, cancel (and a run's children with it)
  answers.py    the answers to a run that waits: an in-doubt call resolved, a
                person's input, a retry now or given up
  forks.py      rollback and state edits: a new branch from a checkpoint
  holds.py      a run's budget, and a run held by a gate let go
  act.py        read, decide, commit under the epoch read, with its audit entry
(Moving a run to new code is an upgrade: runs/durable/upgrade.py.)
"""

from .answers import RESOLUTIONS, give_up, provide_input, resolve_effect, retry_now
from .forks import (
    CHILDREN_CHOICES,
    edit_state,
    patch_state,
    rollback,
    rollback_preview,
    stays_paused,
    undone_children,
)
from .holds import check_budget, lift_hold, set_budget
from .lifecycle import MAX_INPUT_BYTES, cancel, cancel_children, launch, pause, resume

__all__ = [
    "CHILDREN_CHOICES", "MAX_INPUT_BYTES", "RESOLUTIONS", "cancel", "cancel_children",
    "check_budget", "edit_state", "give_up", "launch", "lift_hold", "patch_state", "pause",
    "provide_input", "resolve_effect", "resume", "retry_now", "rollback", "rollback_preview",
    "set_budget", "stays_paused", "undone_children",
]
