"""ChatMessage now belongs to the chat app (runs/chat/migrations/0001_initial.py): the
runs app forgets it, and its table, which the chat app keeps, stays."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0053_agent_code_versions"),
        ("chat", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ChatMessage")],
            database_operations=[],
        ),
    ]
