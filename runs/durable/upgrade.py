"""Runs moving to new code: by a clean replay at a claim, or by an operator's upgrade.

A deploy never makes a logged effect again (docs/deploys.md):

  * **At a claim.** A worker that claims a run of another code of its agent
    (runs/durable/versions.py says when it may) replays the run's history on its own
    code (runs/durable/verify.py). Clean: the run moves to this code where it stands,
    in one commit under the claim's epoch: its version and fingerprint, and the new
    code's state at the latest checkpoint as a checkpoint of its own (the state the
    new code would have built from the same history). No key changes, nothing is made
    again: the steps since that checkpoint replay from the log as after any claim.
    Diverging: the run is handed back untouched, but for why it waits ("waiting for
    a worker with version 1: diverges at step 12, call 3 (fetch_page args differ)")
    and the fingerprint of the code that refused it, whose workers claim it no more.
  * **An operator's upgrade** of a run that diverges continues on the new code from
    the latest checkpoint, on a new branch. Every effect logged since that checkpoint
    is carried over: it waits, under its own key, for the new code to ask for the
    same call (same tool and arguments) and then answers it from the log, wherever it
    is asked (runs/durable/replay.py). So what the new code asks for again is never
    made again, up to the divergence and past it; what it no longer asks for stays in
    the log, never replayed. Before the latest checkpoint nothing changes: what a
    checkpoint holds is done (going back is a rollback, which makes new keys).
"""

from __future__ import annotations

from collections import Counter

from . import clock, events, serde, versions
from . import records as r
from .control import forks
from .control.act import act
from .errors import InvalidTransitionError
from .registry import Agent, AgentRegistry
from .registry import registry as default_registry
from .verify import Divergence, Verdict, replay_history

VERSION_WAIT = "version"  # the attention kind of a run waiting for a worker of its code


def verify(store, run: r.RunRecord, agent: Agent, registry: AgentRegistry) -> Verdict:
    """Replay the run's live branch on `agent`'s code (runs/durable/verify.py)."""
    history = store.history(run.id, r.HistoryQuery(replay=run.branch))
    return replay_history(run, agent, history, store=store, registry=registry)


def later_than(run: r.RunRecord, agent: Agent) -> bool:
    """The run belongs to a later declared version than `agent`'s: never moved back."""
    return versions.newer(run.agent_version, str(agent.version))


# --- at a claim ---------------------------------------------------------------------------
def moved(run: r.RunRecord, agent: Agent, verdict: Verdict, latest_raw: bytes | None,
          how: str = "replay") -> r.Commit:
    """The commit that moves a run whose history replayed cleanly onto `agent`'s code:
    its version and fingerprint, and the replayed state at the latest checkpoint when it
    differs from the recorded one."""
    fingerprint = versions.fingerprint(type(agent))
    commit = r.Commit(run=_code_of(agent),
                      events=[_moved_event(run, agent, fingerprint, verdict, how)])
    if verdict.reached and verdict.state is not None:
        raw = serde.raw_state(verdict.state)
        if raw != latest_raw:
            blob, codec = serde.encode_raw(raw)
            commit.checkpoint = r.CheckpointRecord(
                number=0, branch=run.branch, step_no=verdict.state_step, blob=blob, codec=codec,
                reason="upgrade", created_at=clock.now())
    return commit


def _code_of(agent: Agent) -> r.RunChanges:
    """A run moved onto `agent`'s code: its version, its fingerprint, refused by none."""
    return r.RunChanges(agent_version=str(agent.version),
                        code_fingerprint=versions.fingerprint(type(agent)), version_refused=None)


def _moved_event(run, agent, fingerprint, verdict: Verdict, how: str) -> events.Event:
    return events.version_moved(
        from_version=run.agent_version, from_code=run.code_fingerprint,
        to_version=str(agent.version), to_code=fingerprint, step=run.step_no, how=how,
        replayed_steps=verdict.steps, effects=verdict.asked)


def waiting_for_version(run: r.RunRecord, agent: Agent, *, divergence: Divergence | None = None,
                        later: bool = False) -> dict:
    """The attention of a run handed back for a worker of its own code."""
    wanted = f"waiting for a worker with version {run.agent_version}"
    if later:
        why = f"it is later than this worker's version {agent.version}"
    else:
        why = divergence.describe() if divergence else "its history does not replay here"
    return {"kind": VERSION_WAIT, "message": f"{wanted}: {why}", "version": run.agent_version,
            "code": run.code_fingerprint, "refused_by": versions.fingerprint(type(agent)),
            "refused_version": str(agent.version),
            "divergence": divergence.as_dict() if divergence else None}


def handed_back(run: r.RunRecord, attention: dict) -> r.Commit:
    """A run that this code may not take over, released as it was, with why it waits."""
    status = r.WAITING if run.status == r.WAITING else r.QUEUED
    return r.Commit(run=r.RunChanges(status=status, attention=attention,
                                     version_refused=attention["refused_by"]),
                    events=[events.status(status, reason=attention["message"],
                                          kind=VERSION_WAIT)],
                    release=True)


# --- operators ----------------------------------------------------------------------------
def upgrade(store, run_id: str, *, actor: str, reason: str = "",
            registry: AgentRegistry = default_registry) -> r.RunRecord:
    """Continue the run on its agent's current code: in place when its history replays
    cleanly, else from its latest checkpoint with every effect since carried over."""
    details: dict = {}

    def decide(run):
        if run.status in r.FINAL_STATUSES and run.status != r.FAILED:
            raise InvalidTransitionError("upgrade", run.status)
        agent = registry.get(run.agent)
        loaded = store.load(run_id)
        queued = _QUEUED.over(_code_of(agent))
        if loaded.checkpoint is None:  # it never started: no code of the old version ran
            return r.OperatorCommit(run=queued, take_over=True,
                                    events=[events.status(r.QUEUED, reason="upgrade")])
        verdict = verify(store, run, agent, registry)
        details.update(verdict=verdict.as_dict())
        if verdict.clean:
            latest = serde.resolve_raw([*loaded.bases, loaded.checkpoint])
            commit = moved(run, agent, verdict, latest, how="operator")
            commit.run = _QUEUED.over(commit.run)
            commit.events.append(events.status(r.QUEUED, reason="upgrade"))
            return r.OperatorCommit.of(commit, take_over=True)
        return _carried_fork(store, run, agent, loaded, verdict, queued)
    return act(store, run_id, "upgrade", actor, reason, decide, details=details)


# What an operator's upgrade resets: the run is queued on its new code, anew.
_QUEUED = r.RunChanges(status=r.QUEUED, control=None, attention=None, error=None,
                       crash_count=0, wake_at=None)


def _carried_fork(store, run, agent, loaded: r.Loaded, verdict: Verdict,
                  queued: r.RunChanges) -> r.OperatorCommit:
    """A new branch from the latest checkpoint (the new code's state there if its replay
    reached it), with the effects logged since carried over onto it."""
    latest = loaded.checkpoint
    state = verdict.state if verdict.reached else \
        serde.json.loads(serde.resolve_raw([*loaded.bases, latest]))
    commit = forks.fork(run, forks.forks_of(store, run.id), latest, state, status=r.QUEUED,
                        reason="upgrade", extra=queued)
    commit.effects = carried(loaded.effects, commit.run.branch)
    commit.events.append(_moved_event(run, agent, commit.run.code_fingerprint, verdict,
                                      "operator"))
    return commit


def carried(effects: list[r.EffectRecord], branch: int) -> list[r.EffectRecord]:
    """The effects logged since the latest checkpoint, moved onto `branch` at negative
    seqs (one per effect of a step, in log order), each under its own key."""
    per_step: Counter = Counter()
    moved_effects = []
    for effect in sorted(effects, key=lambda e: (e.step_no, e.seq < 0, abs(e.seq))):
        if effect.step_no <= 0:
            continue  # on_resume's: never replayed, nothing to carry
        per_step[effect.step_no] += 1
        moved_effects.append(effect.carried_to(branch, -per_step[effect.step_no]))
    return moved_effects


def preview(store, run_ids, *, registry: AgentRegistry = default_registry) -> dict:
    """What upgrading these runs would do, before anything is written: per run its
    verdict, and in all how many replay cleanly, where the others diverge, how many
    logged effects stay where they are and how many are carried over."""
    rows, kept, carried_total = [], 0, 0
    for run_id in run_ids:
        run = store.get(run_id)
        agent = registry.get(run.agent)
        verdict = verify(store, run, agent, registry)
        tail = _carried_count(store, run, verdict)
        kept += verdict.logged - tail
        carried_total += tail
        rows.append({"run_id": run.id, "agent": run.agent, "from_version": run.agent_version,
                     "to_version": str(agent.version), "status": run.status,
                     "carried": tail, **verdict.as_dict()})
    diverging = [row for row in rows if not row["clean"]]
    return {"runs": rows, "clean": len(rows) - len(diverging), "diverging": len(diverging),
            "effects_kept": kept, "effects_carried": carried_total, "effects_dropped": 0,
            "summary": summary(len(rows) - len(diverging), diverging, kept, carried_total)}


def _carried_count(store, run: r.RunRecord, verdict: Verdict) -> int:
    """Logged effects an upgrade would carry over rather than keep in place: those after
    the latest checkpoint that the replay did not reach before diverging."""
    if verdict.clean:
        return 0
    tail = [e for e in store.load(run.id).effects if e.step_no > 0]
    at = verdict.divergence
    if not verdict.reached or at is None:
        return len(tail)
    return sum(1 for e in tail if (e.step_no, e.seq) >= (at.step_no, at.seq) or e.carried)


def summary(clean: int, diverging: list[dict], kept: int, carried_count: int) -> str:
    """"38 runs replay cleanly, 4 diverge: at step 12 (3), at step 3 (1); effects kept:
    9,120; effects dropped: 0" and what is carried over."""
    text = f"{clean} run{'s' if clean != 1 else ''} replay cleanly"
    if diverging:
        at = Counter(row["divergence"]["step_no"] for row in diverging)
        where = ", ".join(f"at step {step} ({n})" for step, n in sorted(at.items()))
        text += f", {len(diverging)} diverge: {where}"
    text += f"; effects kept: {kept:,}; effects dropped: 0"
    if carried_count:
        text += (f"; {carried_count:,} effects after a divergence are carried over (the new "
                 "code gets each one it asks for again from the log)")
    return text


def upgrade_many(store, run_ids, *, actor: str, reason: str = "",
                 registry: AgentRegistry = default_registry) -> dict:
    """Upgrade each run; {"upgraded": [ids], "failed": {id: why}}: one run that cannot
    be upgraded (it ended meanwhile) does not stop the others."""
    done, failed = [], {}
    for run_id in run_ids:
        try:
            upgrade(store, run_id, actor=actor, reason=reason, registry=registry)
            done.append(run_id)
        except InvalidTransitionError as exc:
            failed[run_id] = str(exc)
    return {"upgraded": done, "failed": failed}
