"""The operators' bulk upgrade of runs to this server's agent code, previewed first
(runs/durable/upgrade.py): the same preview and the same per-run upgrade for the
Deploys page and the API. Each upgrade is one audited operator action (an AuditEntry
with its reason), as the run page's "upgrade" is."""

from __future__ import annotations

import logging

from runs import services
from runs.durable import DurableError, upgrade
from runs.durable import records as r
from runs.durable.registry import AgentRegistry
from runs.durable.registry import registry as default_registry
from runs.models import Run

MAX_RUNS = 500  # per request: an upgrade replays each run's history

logger = logging.getLogger("agentops.deploys")


class SelectionError(ValueError):
    """Runs a request may not select; nothing was read or changed."""


class TooManyRunsError(SelectionError):
    def __init__(self, count: int):
        super().__init__(f"run_ids: at most {MAX_RUNS} runs per request, not {count}: "
                         "send them in batches")


class UnknownRunsError(SelectionError):
    def __init__(self, missing: list[str]):
        self.missing = missing
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more"
                                           if len(missing) > 10 else "")
        super().__init__(f"run_ids: no run with id {shown}")


def selected(run_ids) -> list[Run]:
    """The runs of `run_ids`, in the order given, each once; refused whole if there are
    more than MAX_RUNS or one is not a run."""
    ids = list(dict.fromkeys(run_ids))
    if len(ids) > MAX_RUNS:
        raise TooManyRunsError(len(ids))
    found = {run.pk: run for run in Run.objects.filter(pk__in=ids)
             .only("id", "agent", "status", "agent_version")}
    missing = [run_id for run_id in ids if run_id not in found]
    if missing:
        raise UnknownRunsError(missing)
    return [found[run_id] for run_id in ids]


def why_not(run: Run, registry: AgentRegistry) -> str:
    """Why an upgrade of this run cannot be, or "" if it can be tried."""
    if run.status in r.FINAL_STATUSES and run.status != r.FAILED:
        return f"it has ended ({run.status})"
    if run.agent not in registry.agents:
        return f"this server's code has no agent {run.agent!r}"
    return ""


def upgrade_preview(*, run_ids, registry: AgentRegistry = default_registry) -> dict:
    """What upgrading these runs would do (upgrade.preview, run by run), nothing written;
    the runs it cannot upgrade are `skipped`, with why."""
    store = services.store()
    skipped, rows, kept, carried = {}, [], 0, 0
    for run in selected(run_ids):
        why = why_not(run, registry)
        try:
            one = None if why else upgrade.preview(store, [run.pk], registry=registry)
        except Exception as exc:  # noqa: BLE001 - one history that cannot be replayed here
            logger.exception("upgrade preview of run %s", run.pk)
            why = f"its history cannot be replayed here: {type(exc).__name__}: {exc}"[:500]
        if why:
            skipped[run.pk] = why
            continue
        rows += one["runs"]
        kept, carried = kept + one["effects_kept"], carried + one["effects_carried"]
    for row in rows:
        row["kept"] = row["logged"] - row["carried"]
    diverging = [row for row in rows if not row["clean"]]
    text = upgrade.summary(len(rows) - len(diverging), diverging, kept, carried)
    if skipped:
        text += f"; {len(skipped)} skipped (see why)"
    return {"runs": rows, "clean": len(rows) - len(diverging), "diverging": len(diverging),
            "effects_kept": kept, "effects_carried": carried, "effects_dropped": 0,
            "summary": text, "skipped": skipped}


def upgrade_runs(*, run_ids, user, reason: str) -> dict:
    """Upgrade each run (services.run_resume with upgrade, which queues it again):
    {"upgraded": [ids], "failed": {id: why}}. One run that cannot be upgraded (it ended
    meanwhile) does not stop the others."""
    done, failed = [], {}
    for run in selected(run_ids):
        try:
            services.run_resume(run_id=run.pk, user=user, reason=reason, upgrade=True)
        except DurableError as exc:
            failed[run.pk] = str(exc)
        except Exception as exc:  # noqa: BLE001 - this run's own failure (a history that
            # cannot be replayed here, say) does not stop the others
            logger.exception("upgrade of run %s", run.pk)
            failed[run.pk] = f"{type(exc).__name__}: {exc}"[:500]
        else:
            done.append(run.pk)
    return {"upgraded": done, "failed": failed}
