from django import template

from runs.schedules.selectors import launch_of_run

register = template.Library()


@register.inclusion_tag("schedules/_launched_by.html")
def launched_by(run):
    """"Launched by schedule X" on a run's page, if a schedule launched it."""
    return {"launch": launch_of_run(run.pk)}
