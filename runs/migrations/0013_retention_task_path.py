"""The retention task moved with the runs/ layout: this renamed it in django-q2's schedule.
django-q2 is gone (runs/migrations/0002_operators_group.py says why this does nothing
now), and 0054 deletes the schedule's row where a database still has it."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_live_effects_index")]
    operations = [migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop)]
