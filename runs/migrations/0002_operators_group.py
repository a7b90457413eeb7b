"""The "Operators" group with runs.operate_run, the workers' heartbeat table, and the
django-q2 schedule that applies the checkpoint retention policy."""

import django.utils.timezone
from django.db import migrations, models

OPERATORS = "Operators"
RETENTION_TASK = "runs.retention.prune_task"


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


def create_retention_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    if not Schedule.objects.filter(func=RETENTION_TASK).exists():
        Schedule.objects.create(name="checkpoint retention", func=RETENTION_TASK,
                                schedule_type="I", minutes=60, repeats=-1,
                                next_run=django.utils.timezone.now())


def remove_retention_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(func=RETENTION_TASK).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
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
        migrations.RunPython(create_retention_schedule, remove_retention_schedule),
    ]
