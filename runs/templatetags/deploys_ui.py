"""Template filters for runs moving between agent codes (runs/deploys/words.py)."""

from django import template

from runs.deploys import words

register = template.Library()


@register.filter
def version_wait(run):
    """The attention of a run waiting for a worker of its code, else None."""
    return words.version_wait(run.status, run.attention)


@register.filter
def moved_text(data) -> str:
    return words.moved_text(data)


@register.filter
def effect_name(effect) -> str:
    """The tool, or "patch ID" for a ctx.patched marker."""
    return words.effect_name(effect.kind, effect.tool)


@register.filter
def effect_call(effect) -> str:
    """"call 3", or "carried over, not asked for again yet" (an upgrade's, seq < 0)."""
    return words.effect_call(effect.seq)
