from django.db import migrations


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_run SET (fillfactor = 70)")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE runs_run RESET (fillfactor)")


class Migration(migrations.Migration):
    """Leave room on each page of runs_run so that the lease and progress updates
    of every effect commit can be HOT updates (no index writes) on PostgreSQL."""

    dependencies = [("runs", "0002_operators_group")]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
