"""Rows as the API shows them (the schemas in runs/api/schemas.py)."""

from __future__ import annotations

from runs.deploys.words import version_wait
from runs.models import Checkpoint, Effect, Run
from runs.web.views.present import event_message
from runs.worker.stalls import mark_stalls

CHECKPOINT_FIELDS = ("number", "branch", "step_no", "size", "reason", "parent_number",
                     "created_at")
EFFECT_FIELDS = ("branch", "step_no", "seq", "kind", "tool", "key", "idempotent", "status",
                 "args_preview", "result", "error", "attempts", "started_at", "finished_at",
                 "resolution", "superseded")


def runs_out(runs) -> list[dict]:
    runs = mark_stalls(list(runs))
    return [_run(run) for run in runs]


def run_out(run: Run) -> dict:
    return runs_out([run])[0]


def _run(run: Run) -> dict:
    owner = run.owner.get_username() if run.owner_id and run.owner else None
    return {"id": run.id, "agent": run.agent, "agent_version": run.agent_version,
            "status": run.status, "owner": owner, "branch": run.branch, "step_no": run.step_no,
            "event_seq": run.event_seq, "checkpoint_count": run.checkpoint_count,
            "control": run.control, "inputs": run.inputs, "output": run.output,
            "error": run.error, "attention": run.attention,
            "progress": {"done": run.progress_done, "total": run.progress_total,
                         "message": run.progress_message,
                         "percent": round(run.progress_percent, 1)},
            "stall": run.stall.as_dict() if getattr(run, "stall", None) else None,
            "created_at": run.created_at, "updated_at": run.updated_at,
            "finished_at": run.finished_at, "parent_id": run.parent_id,
            "code_fingerprint": run.code_fingerprint,
            "version_wait": (version_wait(run.status, run.attention) or {}).get("message")}


def approval_out(row) -> dict:
    return {"id": row.id, "run_id": row.run_id, "tool": row.tool, "arguments": row.arguments,
            "args_preview": row.args_preview, "approvers": row.approvers,
            "status": row.status, "requested_at": row.requested_at, "deadline": row.deadline,
            "decided_by": row.decided_by, "decided_at": row.decided_at, "reason": row.reason,
            "fallback": row.rule.get("fallback", "deny")}


def event_out(event) -> dict:
    return event_message(event)


def checkpoint_out(checkpoint: Checkpoint) -> dict:
    return {name: getattr(checkpoint, name) for name in CHECKPOINT_FIELDS}


def effect_out(effect: Effect) -> dict:
    return {**{name: getattr(effect, name) for name in EFFECT_FIELDS},
            "carried": effect.seq < 0}
