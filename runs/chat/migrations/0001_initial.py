"""ChatMessage moves from the runs app to this one. Its table stays as it is
(runs_chatmessage, made by runs 0050), rows and index included: this migration and
runs 0054 change Django's state only. The content type moves with it, so permissions
given on chat messages stay given."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def move_content_type(apps, schema_editor, old="runs", new="chat"):
    content_types = apps.get_model("contenttypes", "ContentType")
    if not content_types.objects.filter(app_label=new, model="chatmessage").exists():
        content_types.objects.filter(app_label=old, model="chatmessage").update(app_label=new)


def move_content_type_back(apps, schema_editor):
    move_content_type(apps, schema_editor, old="chat", new="runs")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("runs", "0053_agent_code_versions"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ChatMessage",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                                   serialize=False, verbose_name="ID")),
                        ("text", models.TextField(blank=True)),
                        ("end", models.BooleanField(default=False,
                                                    help_text="the user ended the chat")),
                        ("state", models.CharField(choices=[("queued", "queued"),
                                                            ("delivered", "delivered")],
                                                   default="queued", max_length=16)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("delivered_at", models.DateTimeField(blank=True, null=True)),
                        ("run", models.ForeignKey(db_constraint=False,
                                                  on_delete=django.db.models.deletion.CASCADE,
                                                  related_name="chat_messages",
                                                  to="runs.run")),
                        ("sender", models.ForeignKey(blank=True, null=True,
                                                     on_delete=django.db.models.deletion.SET_NULL,
                                                     related_name="+",
                                                     to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "runs_chatmessage",
                        "ordering": ["run", "id"],
                        "indexes": [models.Index(fields=["run", "state", "id"],
                                                 name="chat_queue")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, move_content_type_back),
    ]
