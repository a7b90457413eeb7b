"""The audit after the storm: the database and the outside world, run by run.

Each check returns findings (strings that name the run and what is wrong). Nothing
here is relaxed to make a storm pass: a finding is a bug in the engine, a worker,
an agent or the harness, and it is reported as such.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import httpx

from runs.models import AuditEntry, Checkpoint, Effect, Run, RunEvent
from tests.chaos.workload import normalise

# Tools that write one record per call to the sandbox's idempotent records API.
RECORD_TOOLS = ("tests.workload_agents.post_record", "builtin_agents.tools.dataset.write_batch",
                "builtin_agents.tools.research.write_note")


@dataclass
class RunData:
    run: Run
    effects: list[Effect]
    events: list[RunEvent]
    checkpoints: list[Checkpoint]
    audits: list[AuditEntry]


@dataclass
class Outside:
    records: list[dict]
    notifications: dict[str, int]
    stats: dict


@dataclass
class Audit:
    findings: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)

    def find(self, message: str) -> None:
        self.findings.append(message)


def load(run_ids: list[str]) -> dict[str, RunData]:
    runs = {r.id: r for r in Run.objects.filter(pk__in=run_ids)}
    by_run = defaultdict(lambda: ([], [], [], []))
    for e in Effect.objects.filter(run_id__in=run_ids).order_by("id"):
        by_run[e.run_id][0].append(e)
    for ev in RunEvent.objects.filter(run_id__in=run_ids).order_by("run_id", "seq"):
        by_run[ev.run_id][1].append(ev)
    for c in Checkpoint.objects.filter(run_id__in=run_ids).order_by("run_id", "number"):
        by_run[c.run_id][2].append(c)
    for a in AuditEntry.objects.filter(run_id__in=run_ids).order_by("created_at"):
        by_run[a.run_id][3].append(a)
    return {run_id: RunData(run, *by_run[run_id]) for run_id, run in runs.items()}


def load_outside(sandbox_url: str) -> Outside:
    # one request lists up to 10,000 records; this bounds a sandbox that never answers
    with httpx.Client(timeout=60) as client:
        records = client.get(f"{sandbox_url}/api/records", params={"limit": 10_000}).json()
        if records["count"] > 10_000:
            raise RuntimeError("more sandbox records than one listing returns")
        notes = client.get(f"{sandbox_url}/api/notifications", params={"limit": 0}).json()
        stats = client.get(f"{sandbox_url}/api/records/stats").json()
    return Outside(records["records"], notes["per_unit"], stats)


def audit(plans: dict, references: dict, data: dict[str, RunData], outside: Outside,
          followers: dict) -> Audit:
    result = Audit()
    outcome = Counter()
    for run_id, plan in plans.items():
        d = data.get(run_id)
        if d is None:
            result.find(f"lost run: {run_id} ({plan.config}) was launched and is not in the "
                        "database")
            continue
        outcome[d.run.status] += 1
        check_status(result, plan, d)
        check_output(result, plan, references, d)
        check_events(result, d)
        check_branches(result, d)
        check_fencing(result, d)
    check_outside(result, data, outside)
    check_followers(result, data, followers)
    result.figures["outcomes"] = dict(outcome)
    return result


def _label(d: RunData) -> str:
    return f"run {d.run.id} ({d.run.agent})"


def check_status(result: Audit, plan, d: RunData) -> None:
    run = d.run
    if run.status == "cancelled":
        if plan.cancel_at is None:
            result.find(f"{_label(d)} is cancelled, and nobody cancelled it")
        return
    if plan.cancel_at is not None and run.status == "succeeded":
        # Accepted while it ran: it may finish the step in flight, but start no new call.
        late = [e for e in d.effects if e.kind == "call" and e.started_at
                and e.started_at.timestamp() > plan.cancel_at]
        if plan.cancel_status != "running" or len(late) > 1:
            result.find(f"{_label(d)} succeeded after its cancel was accepted "
                        f"({plan.cancel_status}); {len(late)} call(s) started after it")
        return
    if plan.cancel_at is not None:
        result.find(f"{_label(d)} was cancelled (accepted) and ended {run.status}")
        return
    if run.status == "failed":
        error = run.error or {}
        result.find(f"{_label(d)} failed: {error.get('type')}: {error.get('message', '')[:300]}")
    elif run.status != "succeeded":
        result.find(f"stuck run: {_label(d)} is {run.status} "
                    f"({(run.attention or {}).get('kind', '')} {run.control or ''})".strip())


def check_output(result: Audit, plan, references: dict, d: RunData) -> None:
    if d.run.status != "succeeded":
        return
    expected = references[plan.config]["output"]
    got = normalise(d.run.output, d.run.id)
    if got != expected:
        result.find(f"{_label(d)}: output differs from the fault-free run of {plan.config}: "
                    f"{str(got)[:300]} != {str(expected)[:300]}")


def check_events(result: Audit, d: RunData) -> None:
    seqs = [e.seq for e in d.events]
    if seqs != list(range(1, len(seqs) + 1)) or (seqs and seqs[-1] != d.run.event_seq):
        missing = sorted(set(range(1, d.run.event_seq + 1)) - set(seqs))[:10]
        result.find(f"{_label(d)}: event seqs are not 1..{d.run.event_seq} "
                    f"(missing {missing}, {len(seqs)} rows)")
    numbers = [c.number for c in d.checkpoints]
    if numbers != list(range(1, len(numbers) + 1)) or len(numbers) != d.run.checkpoint_count:
        result.find(f"{_label(d)}: checkpoint numbers {numbers[:20]} are not "
                    f"1..{d.run.checkpoint_count}")
    announced = Counter(e.data.get("number") for e in d.events if e.kind == "checkpoint")
    if announced != Counter(numbers):
        result.find(f"{_label(d)}: checkpoint events {sorted(announced.elements())[:20]} do not "
                    f"match the checkpoints {numbers[:20]}")


def lineage(d: RunData) -> dict[int, int | None]:
    """{branch of the live lineage: the highest step a live effect on it may have}."""
    by_number = {c.number: c for c in d.checkpoints}
    first = {}
    for c in d.checkpoints:
        first.setdefault(c.branch, c)
    allowed: dict[int, int | None] = {d.run.branch: None}
    branch, limit = d.run.branch, None
    while branch in first and first[branch].parent_number in by_number:
        fork = first[branch]
        limit = fork.step_no if limit is None else min(limit, fork.step_no)
        branch = by_number[fork.parent_number].branch
        if branch in allowed:
            break
        allowed[branch] = limit
    return allowed


def check_branches(result: Audit, d: RunData) -> None:
    allowed = lineage(d)
    for e in d.effects:
        if e.superseded:
            continue
        if e.branch not in allowed or (allowed[e.branch] is not None
                                       and e.step_no > allowed[e.branch]):
            result.find(f"{_label(d)}: live effect {e.tool} at branch {e.branch} step "
                        f"{e.step_no} seq {e.seq} is on a dead branch (live: {allowed})")


def check_fencing(result: Audit, d: RunData) -> None:
    """No write from a fenced epoch: an effect written by epoch e must be done before
    the first claim of a later epoch."""
    claims = sorted((e.data["epoch"], e.created_at) for e in d.events
                    if e.kind == "status" and isinstance(e.data.get("epoch"), int))
    for e in d.effects:
        if e.resolution in ("done", "skip"):
            continue  # the operator wrote it, on the epoch of its take-over
        at = e.started_at if e.kind == "input" else (e.finished_at or e.started_at)
        if at is None:
            continue
        later = [when for epoch, when in claims if epoch > e.epoch]
        if later and at > min(later):
            result.find(f"{_label(d)}: effect {e.tool} at {e.branch}/{e.step_no}/{e.seq} was "
                        f"written by epoch {e.epoch} at {at.isoformat()}, after epoch "
                        f"{min(ep for ep, w in claims if ep > e.epoch)} claimed the run")


def check_outside(result: Audit, data: dict[str, RunData], outside: Outside) -> None:
    effects = {e.key: (d, e) for d in data.values() for e in d.effects}
    ours = tuple(data)
    units_live, redone, unlogged = Counter(), 0, 0
    recorded = Counter()
    for record in outside.records:
        key = record["key"]
        if not key.startswith(ours):
            continue
        recorded[key] += 1
        found = effects.get(key)
        if found is None:
            if _position_is_live(data, key):
                result.find(f"phantom write: the target holds {key} ({record['unit']}), which "
                            "no effect logged on the run's live lineage")
            else:
                unlogged += 1  # the call's log died with its worker; a rollback then undid it
            continue
        if found[1].superseded:
            redone += 1
        else:
            units_live[record["unit"]] += 1
    for unit, n in units_live.items():
        if n > 1:
            result.find(f"duplicate effect downstream: unit {unit} written {n} times by live "
                        "effects")
    for d in data.values():
        for e in d.effects:
            if e.tool in RECORD_TOOLS and not e.superseded and e.status == "done" \
                    and recorded[e.key] != 1:
                result.find(f"{_label(d)}: logged write {e.key} ({e.tool}) has "
                            f"{recorded[e.key]} records downstream")
    check_notifications(result, data, outside)
    stats = outside.stats
    if stats.get("keys_processing"):
        result.find(f"the target has {stats['keys_processing']} keys stuck in processing")
    result.figures["outside"] = {
        "records": sum(recorded.values()), "redone_after_rollback": redone,
        "unlogged_then_rolled_back": unlogged,
        "calls": stats.get("calls"), "replays": stats.get("replays"),
        "conflicts": stats.get("conflicts"),
        "keys_called_more_than_once": stats.get("keys_called_more_than_once"),
        "notifications": sum(n for u, n in outside.notifications.items() if u.startswith(ours)),
    }


def _position_is_live(data: dict[str, RunData], key: str) -> bool:
    run_id, branch, step, _ = key.rsplit(":", 3)
    allowed = lineage(data[run_id])
    branch, step = int(branch), int(step)
    return branch in allowed and (allowed[branch] is None or step <= allowed[branch])


def check_notifications(result: Audit, data: dict[str, RunData], outside: Outside) -> None:
    """Per unit: arrivals between the calls logged done and those plus the intents left
    (a call that may or may not have happened); more is a silent repeat."""
    for d in data.values():
        rows = defaultdict(lambda: Counter())
        for e in d.effects:
            if e.kind == "call" and not e.idempotent:
                unit = _unit(d.run.id, e.args_preview)
                rows[unit][e.status] += 1
        units = set(rows) | {u for u in outside.notifications if u.startswith(d.run.id)}
        for unit in units:
            arrived = outside.notifications.get(unit, 0)
            done, intent = rows[unit]["done"], rows[unit]["intent"]
            if arrived > done + intent:
                result.find(f"{_label(d)}: non-idempotent call {unit} arrived {arrived} times "
                            f"for {done} logged call(s) and {intent} in doubt: repeated "
                            "without an operator's decision")
            elif arrived < done:
                result.find(f"{_label(d)}: non-idempotent call {unit} logged done {done} "
                            f"time(s), arrived {arrived}")


def _unit(run_id: str, preview: str) -> str:
    from tests.chaos.operator import unit_of
    return unit_of(run_id, preview)


def check_followers(result: Audit, data: dict[str, RunData], followers: dict) -> None:
    reconnects = 0
    for run_id, f in followers.items():
        d = data.get(run_id)
        if d is None:
            continue
        reconnects += max(0, f.connects - 1)
        head = d.run.event_seq
        if f.seqs != list(range(1, head + 1)):
            result.find(f"follower of {_label(d)} saw {len(f.seqs)} events for head {head}: "
                        f"{'; '.join(f.problems[:5]) or 'missing the end'} "
                        f"(last {f.last}, {f.connects} connections)")
        for error in f.errors[:3]:
            result.find(f"follower of {_label(d)} got a protocol error: {error}")
    result.figures["followers"] = {"count": len(followers), "reconnects": reconnects,
                                   "events": sum(len(f.seqs) for f in followers.values())}
