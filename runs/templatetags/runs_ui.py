"""Small display helpers for the run pages. They return text; autoescape does the rest."""

from django import template
from django.utils import timezone

from runs.web.views import present
from runs.web.views.retrying import retrying

register = template.Library()


@register.filter
def status_label(status: str) -> str:
    return present.STATUS_LABELS.get(status, status)


@register.filter
def retry_wait(run):
    """The retry `run` waits for (tool, attempt, error, seconds), or None."""
    return retrying(run.status, run.attention)


@register.filter
def short_id(run_id: str) -> str:
    return (run_id or "")[:8]


@register.filter
def short_tool(name: str) -> str:
    return present.short_tool(name)


@register.filter
def human_ms(ms) -> str:
    return present.human_ms(ms)


@register.filter
def human_bytes(size) -> str:
    return present.human_bytes(size)


@register.filter
def retention_notice(run) -> str:
    return present.retention_notice(run)


@register.filter
def run_duration(run) -> str:
    """Wall time from launch to the end (or now)."""
    end = run.finished_at or timezone.now()
    seconds = max(0.0, (end - run.created_at).total_seconds())
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"


@register.filter
def number(value) -> str:
    """12.0 → "12", 2.5 → "2.5"."""
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


@register.simple_tag(takes_context=True)
def query_with(context, **changes) -> str:
    """The current query string with some parameters changed (empty ones dropped)."""
    query = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            query.pop(key, None)
        else:
            query[key] = value
    encoded = query.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.filter
def ago(when) -> str:
    """"just now", "5 min ago", "3 h ago", or a date for old ones."""
    if not when:
        return ""
    seconds = (timezone.now() - when).total_seconds()
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h ago"
    return timezone.localtime(when).strftime("%Y-%m-%d %H:%M")
