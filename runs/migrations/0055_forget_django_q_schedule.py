"""django-q2 is gone: each worker tree's main applies the checkpoint retention policy
(runs/worker/sweep.py). A database that ran migration 0002 with django-q2 installed has
its retention schedule in django_q_schedule, which nothing runs any more (a qcluster of
an older release left running during a rolling upgrade would, until it stops): delete
that row. The django_q_* tables stay as they are, unused (docs/workers.md). A database
that never had django-q2 has no such table: nothing to do."""

from django.db import migrations

RETENTION_TASKS = ("runs.retention.prune_task", "runs.storage.retention.prune_task")


def forget_schedule(apps, schema_editor):
    connection = schema_editor.connection
    if "django_q_schedule" not in connection.introspection.table_names():
        return
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_q_schedule WHERE func IN (%s, %s)", RETENTION_TASKS)


class Migration(migrations.Migration):
    dependencies = [("runs", "0054_chat_message_to_chat_app")]
    operations = [migrations.RunPython(forget_schedule, migrations.RunPython.noop)]
