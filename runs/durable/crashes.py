"""The crash-loop guard's count: the takeovers in a row that found a run where the claim
before left it.

A claim that replaces a lease its holder never released (`Claim.crashed`) cannot tell a
worker that died from one alive but late: a lease keeper starved under load, or a
deploy's hand-off that outlived the lease, leaves the lease to run out as a crash does.
What tells a step that kills its worker from those is progress. Each claim records the
run's progress mark as it resumes (`crash_step`: its completed steps; `crash_effects`:
the effects with an outcome since its checkpoint). A takeover that finds the run past
that mark counts 1 again; one that finds it where the last claim left it counts one
more, and `crash_loop_limit` of those in a row stop the run for an operator
(session.py). A step that kills its worker every time never moves the mark: a replay
answers what was logged before the crash from the log and writes nothing new, and the
call in doubt it retries stays an intent until its outcome is known.
"""

from __future__ import annotations

from . import records as r

OUTCOMES = frozenset({r.DONE, r.ERROR})


def progress(loaded: r.Loaded) -> int:
    """The effects with an outcome on the run's live branch since its latest checkpoint:
    with the run's step_no, how far it got. Counted from what a resume loads anyway."""
    return sum(1 for effect in loaded.effects if effect.status in OUTCOMES)


def count(run: r.RunRecord, crashed: bool, effects: int) -> int:
    """The run's crashes in a row as this claim finds it with `effects` (progress())."""
    if not crashed:
        return 0
    if (run.crash_step, run.crash_effects) == (run.step_no, effects):
        return run.crash_count + 1  # nothing new since the last claim
    return 1


def claimed(run: r.RunRecord, crashes: int, effects: int) -> r.RunChanges:
    """What a claim records as the run resumes: its count and its progress mark."""
    return r.RunChanges(crash_count=crashes, crash_step=run.step_no, crash_effects=effects)
