"""The "Operators" group with runs.operate_run and the workers' heartbeat table.

It also made a django-q2 schedule for the checkpoint retention policy. django-q2 is gone
(each worker tree's main applies the policy: runs/worker/sweep.py), so that step does
nothing now and this migration no longer depends on django-q2's own: a new database
migrates without it, and one that ran it keeps its row until 0054 deletes it."""

import django.utils.timezone
from django.db import migrations, models

OPERATORS = "Operators"


def create_operators(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    # post_migrate creates permissions only after every migration ran: make the row now.
    run_type, _ = ContentType.objects.get_or_create(app_label="runs", model="run")
    permission, _ = Permission.objects.get_or_create(
        content_type=run_type, codename="operate_run",
        defaults={"name": "Can operate every run (pause, resume, cancel, roll back)"})
    group, _ = Group.objects.get_or_create(name=OPERATORS)
    group.permissions.add(permission)


def remove_operators(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=OPERATORS).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerHeartbeat",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("host", models.CharField(max_length=200)),
                ("pid", models.IntegerField()),
                ("cluster", models.CharField(blank=True, default="", max_length=100)),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_seen", models.DateTimeField(default=django.utils.timezone.now)),
                ("processes", models.JSONField(default=list, help_text="the cluster's child processes")),
            ],
            options={
                "ordering": ["host", "pid"],
                "constraints": [models.UniqueConstraint(fields=("host", "pid"), name="heartbeat_unique_process")],
            },
        ),
        migrations.RunPython(create_operators, remove_operators),
        migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop),
    ]
