"""How runs look: one line per event, the timeline's geometry, the output.

Everything here returns plain text or numbers; templates and the browser escape it
(Django's autoescape, `textContent`), so text an agent wrote never becomes markup.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

from runs.deploys.words import moved_text
from runs.durable import records as r
from runs.durable.policies.budget import money
from runs.web.views.retrying import attempt_text, retrying

STATUS_LABELS = {
    r.QUEUED: "queued", r.RUNNING: "running", r.PAUSED: "paused", r.WAITING: "waiting",
    r.NEEDS_ATTENTION: "needs attention", r.SUCCEEDED: "succeeded", r.FAILED: "failed",
    r.CANCELLED: "cancelled",
}


def short_tool(name: str) -> str:
    return (name or "?").rsplit(".", 1)[-1]


def human_bytes(size: int | float | None) -> str:
    size = float(size or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def human_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def _compact(value, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status_text(data: dict) -> str:
    status = STATUS_LABELS.get(data.get("status"), str(data.get("status", "?")))
    parts = [f"status → {status}"]
    if data.get("event"):
        parts.append(str(data["event"]))
    if data.get("resumed_from") is not None:
        after = data.get("after")
        parts.append(f"resumed from checkpoint #{data['resumed_from']}"
                     + (f" after {after}" if after else ""))
    if data.get("reason"):
        parts.append(str(data["reason"]))
    waiting = retrying(data.get("status"), data)
    if waiting is not None:
        parts.append(waiting.event_text())
    elif data.get("error"):
        parts.append(f"{data.get('type', 'error')}: {data['error']}")
    if data.get("kind") == "input" and data.get("prompt"):
        parts.append(f"asks: {data['prompt']}")
    elif data.get("kind") == "sleep" and data.get("seconds") is not None:
        parts.append(f"sleeping {data['seconds']} s")
    elif data.get("kind") == "children" and isinstance(data.get("pending"), list):
        what = "a slot under its cap" if data.get("waiting_for") == "slot" else "its children"
        parts.append(f"waiting for {what}: {len(data['pending'])} running")
    return " · ".join(parts)


def _effect_text(data: dict) -> str:
    text = f"{short_tool(data.get('tool', ''))} {data.get('status', '')}"
    if data.get("ms") is not None:
        text += f" in {human_ms(data['ms'])}"
    if data.get("resolution"):
        text += f" (resolved: {data['resolution']})"
    if data.get("refused"):
        text += f" (refused: {data['refused']})"
    if isinstance(data.get("cost"), (int, float)):  # a metered call (docs/budgets.md)
        text += f" · {data.get('tokens', 0)} tokens, {money(data['cost'])}"
    text += f" · step {data.get('step', '?')}"
    if data.get("seq"):
        text += f", call {data['seq'] + 1}"
    return text


def _budget_text(budget) -> str:
    budget = budget if isinstance(budget, dict) else {}
    parts = [money(budget["cost"])] if isinstance(budget.get("cost"), (int, float)) else []
    if isinstance(budget.get("tokens"), int):
        parts.append(f"{budget['tokens']:,} tokens")
    return " and ".join(parts) or "none"


def _progress_text(data: dict) -> str:
    done, total = data.get("done", 0), data.get("total", 0)
    text = f"progress {done:g}/{total:g}" if isinstance(done, (int, float)) and isinstance(
        total, (int, float)) else f"progress {done}/{total}"
    return text + (f" · {data['message']}" if data.get("message") else "")


def _checkpoint_text(data: dict) -> str:
    if "step" not in data:  # its row is gone (retention): the event holds the number only
        return f"checkpoint #{data.get('number')}"
    return (f"checkpoint #{data.get('number')} at step {data.get('step')} "
            f"(branch {data.get('branch')}, {human_bytes(data.get('size'))}"
            + (f", {data['reason']}" if data.get("reason") not in (None, "step") else "")
            + ")")


def _stream_text(data: dict) -> str:
    count = len(str(data.get("text", "")))
    return (f"{data.get('tool', '?')} streamed {count} character{'' if count == 1 else 's'} "
            f"(attempt {data.get('attempt', '?')}, from {data.get('offset', '?')})")


def _audit_text(data: dict) -> str:
    text = f"{data.get('actor', '?')}: {data.get('action', '?')}"
    return text + (f" — {data['reason']}" if data.get("reason") else "")


def _gate_text(data: dict) -> str:
    return (f"{short_tool(data.get('tool', ''))}: approved by {data['approved_by']}"
            if data.get("approved_by") else f"{data.get('tool', '')} allowed")


def _fork_text(verb: str, data: dict) -> str:
    """A new branch: a rollback, a state edit or an upgrade."""
    return (f"{verb} checkpoint #{data.get('from_checkpoint')} → branch {data.get('branch')} "
            f"at step {data.get('step')}")


EVENT_TEXT = {  # kind -> the line of an event's data
    "log": lambda data: str(data.get("message", "")),
    "status": _status_text,
    "progress": _progress_text,
    "effect": _effect_text,
    "attempt": attempt_text,
    "checkpoint": _checkpoint_text,
    "stream": _stream_text,
    "output": lambda data: "output ready",
    "child": lambda data: (f"spawned a child run of {data.get('agent', '?')}: "
                           f"{str(data.get('run_id', ''))[:8]}"),
    "input_requested": lambda data: f"waiting for input: {data.get('prompt', '')}",
    "input_received": lambda data: "input received",
    "control": lambda data: f"{data.get('action', '?')} requested",
    "audit": _audit_text,
    "gate": _gate_text,
    "budget": lambda data: f"budget set to {_budget_text(data.get('budget'))}",
    "version": moved_text,  # moved to another code of its agent (docs/deploys.md)
    "rollback": functools.partial(_fork_text, "rolled back to"),
    "edit": functools.partial(_fork_text, "state edited from"),
    "upgrade": functools.partial(_fork_text, "upgraded from"),
}


def describe_event(kind: str, data) -> str:
    """One line of plain text for an event."""
    data = data if isinstance(data, dict) else {"value": data}
    text = EVENT_TEXT.get(kind)
    return text(data) if text is not None else f"{kind} {_compact(data)}"


def event_message(event) -> dict:
    """What the live feed sends for one RunEvent: its row plus the line to show."""
    message = event.as_message()
    message["text"] = describe_event(event.kind, event.data)
    return message


# --- output ------------------------------------------------------------------------------
def retention_notice(run) -> str:
    """What retention deleted of the run (runs/storage/event_retention.py), in words, in
    place of a gap in its log; "" if nothing."""
    before, effects = run.events_pruned_before, run.effects_pruned
    if before <= 1 and not effects:
        return ""
    when = f"on {run.pruned_at.date().isoformat()}" if run.pruned_at else "now"
    parts = []
    if before > 1:
        parts.append(f"Events before #{before} were deleted {when} by retention "
                     f"({run.events_pruned} events; its status changes are kept)")
    if effects:
        parts.append(f"{effects} of its effects were deleted {when} by retention (metered "
                     "calls and those an operator acted on are kept)")
    return "; ".join(parts) + "."


def pretty_json(value, limit: int = 200_000) -> tuple[str, bool]:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > limit:
        return text[:limit] + "\n…", True
    return text, False


def output_rows(output) -> list[dict]:
    """A dict output as rows of (key, scalar text or pretty JSON)."""
    if not isinstance(output, dict):
        return []
    rows = []
    for key, value in output.items():
        if isinstance(value, (dict, list)):
            rows.append({"key": key, "text": pretty_json(value, 20_000)[0], "block": True})
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            rows.append({"key": key, "text": text, "block": isinstance(value, str) and (
                "\n" in value or len(value) > 120)})
    return rows


# --- timeline ---------------------------------------------------------------------------
WIDTH = 1000
PAD_X = 28
LANE = 28
TOP = 20


@dataclass
class Lane:
    branch: int
    y: float
    x1: float
    x2: float
    current: bool = False
    label_y: float = 0


@dataclass
class Mark:
    number: int
    branch: int
    step: int
    reason: str
    x: float
    y: float
    size: int
    created_at: object
    parent: int | None = None


@dataclass
class Timeline:
    width: int
    height: int
    max_step: int
    radius: float
    lanes: list[Lane] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    forks: list[dict] = field(default_factory=list)
    troubles: list[dict] = field(default_factory=list)
    ticks: list[dict] = field(default_factory=list)
    head: dict | None = None
    tick_bottom: float = 0
    label_y: float = 0


def build_timeline(run, checkpoints, troubles) -> Timeline:
    """Steps on x, one lane per branch on y; checkpoint marks, forks between lanes
    (rollback, edit, upgrade), failures and attention stops, and the run's head."""
    branches = sorted({c.branch for c in checkpoints} | {run.branch})
    lane_y = {b: TOP + i * LANE for i, b in enumerate(branches)}
    max_step = _max_step(run, checkpoints, troubles)
    span = WIDTH - 2 * PAD_X

    def x_of(step) -> float:
        return round(PAD_X + span * (step / max_step), 2)

    radius = max(2.5, min(6.0, span / max(len(checkpoints), 1) / 2.5))
    tl = Timeline(width=WIDTH, height=TOP + LANE * (len(branches) - 1) + 26, max_step=max_step,
                  radius=round(radius, 2))
    tl.lanes = [_lane(run, checkpoints, b, lane_y[b], x_of) for b in branches]
    _add_checkpoints(tl, checkpoints, lane_y, x_of)
    tl.troubles = [_trouble(run, checkpoints, e, lane_y, x_of) for e in troubles]
    if run.status not in r.FINAL_STATUSES:
        tl.head = {"x": x_of(run.step_no), "y": lane_y[run.branch], "status": run.status,
                   "r": tl.radius + 3}
    tl.ticks = [{"x": x_of(s), "label": s} for s in _ticks(max_step)]
    tl.tick_bottom, tl.label_y = tl.height - 14, tl.height - 3
    return tl


def _max_step(run, checkpoints, troubles) -> int:
    max_step = max([run.step_no, 1] + [c.step_no for c in checkpoints]
                   + [int(e.data.get("step") or 0) for e in troubles])
    if run.progress_total and run.status not in r.FINAL_STATUSES and run.progress_done:
        max_step = max(max_step, run.step_no + 1)
    return max_step


def _lane(run, checkpoints, branch: int, y: float, x_of) -> Lane:
    on_branch = [c for c in checkpoints if c.branch == branch]
    first = min(on_branch, key=lambda c: c.number, default=None)
    start = first.step_no if first else 0
    end = max([c.step_no for c in on_branch] + ([run.step_no] if branch == run.branch else []))
    return Lane(branch, y, x_of(start), x_of(max(end, start)), branch == run.branch, y + 3)


def _add_checkpoints(tl: Timeline, checkpoints, lane_y: dict, x_of) -> None:
    """A mark per checkpoint, and a fork where one's parent is on another branch."""
    by_number = {c.number: c for c in checkpoints}
    for c in checkpoints:
        tl.marks.append(Mark(c.number, c.branch, c.step_no, c.reason, x_of(c.step_no),
                             lane_y[c.branch], c.size, c.created_at, c.parent_number))
        parent = by_number.get(c.parent_number) if c.parent_number else None
        if parent is not None and parent.branch != c.branch:
            tl.forks.append({"x1": x_of(parent.step_no), "y1": lane_y[parent.branch],
                             "x2": x_of(c.step_no), "y2": lane_y[c.branch], "reason": c.reason,
                             "number": c.number})


def _trouble(run, checkpoints, event, lane_y: dict, x_of) -> dict:
    """A cross where a failure or an attention stop happened."""
    branch = _branch_at(checkpoints, event.created_at, run.branch)
    x, y = x_of(int(event.data.get("step") or run.step_no)), lane_y.get(branch, TOP)
    return {"d": f"M {x - 5} {y - 5} L {x + 5} {y + 5} M {x + 5} {y - 5} L {x - 5} {y + 5}",
            "status": event.data.get("status"), "text": describe_event(event.kind, event.data),
            "seq": event.seq}


def _branch_at(checkpoints, when, default: int) -> int:
    before = [c for c in checkpoints if c.created_at <= when]
    return max(before, key=lambda c: c.number).branch if before else default


def _ticks(max_step: int, count: int = 6) -> list[int]:
    if max_step <= count:
        return list(range(max_step + 1))
    raw = max_step / count
    magnitude = 10 ** (len(str(int(raw))) - 1)
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return list(range(0, max_step + 1, step))
