"""The retention task moved with the runs/ layout (runs/storage/retention.py)."""

from django.db import migrations

OLD, NEW = "runs.retention.prune_task", "runs.storage.retention.prune_task"


def forwards(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(func=OLD).update(func=NEW)


def backwards(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(func=NEW).update(func=OLD)


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_live_effects_index"), ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")]
    operations = [migrations.RunPython(forwards, backwards)]
