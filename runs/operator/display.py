"""Display helpers for the operator pages."""

from datetime import UTC, datetime

from django import template

from runs.operator.forms import RunActionForm
from runs.web.views.present import STATUS_LABELS

register = template.Library()


@register.filter
def action_confirm(action: str) -> str:
    """The question to ask before `action`, or "" for an action that needs none."""
    return RunActionForm.CONFIRM.get(action, "")


@register.filter
def recorded_time(value) -> datetime | None:
    """A time as it is stored: a datetime (a row's column) or seconds since the epoch (the
    engine's records, a run's attention); None when none was recorded (None, or the 0.0
    a record holds for a time never set)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(value, tz=UTC)
    return None


@register.filter
def audit_change(entry) -> str:
    """What an operator action changed, from its audit entry's before and after: a pause
    of a running run changes its control, not its status, and says so."""
    before, after = entry.before or {}, entry.after or {}
    label = STATUS_LABELS.get(after.get("status"), after.get("status", "?"))
    if before.get("status") != after.get("status"):
        parts = [f"{STATUS_LABELS.get(before.get('status'), before.get('status', '?'))} → {label}"]
    elif after.get("control") and after.get("control") != before.get("control"):
        parts = [f"{label}, {after['control']} requested"]
    elif before.get("control") and not after.get("control"):
        parts = [f"{label}, {before['control']} withdrawn"]
    else:
        parts = [f"still {label}"]
    if before.get("branch") != after.get("branch"):
        parts.append(f"branch {before.get('branch')} → {after.get('branch')}")
    return ", ".join(parts)
