"""django-q2 is gone (docs/workers.md): a new database migrates without it installed, and
migration 0055 forgets its retention schedule where a database of an older release has
django_q's tables (which stay, unused)."""

import importlib
import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.support.processes import ROOT

FORGET = importlib.import_module("runs.migrations.0055_forget_django_q_schedule")

MIGRATE_WITHOUT_DJANGO_Q = """
import sys
sys.modules["django_q"] = None  # as if not installed: any import of it fails
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "migrate", "--noinput", "-v0"])
execute_from_command_line(["manage.py", "migrate", "--check"])  # nothing left unapplied
"""


@pytest.mark.sqlite
def test_a_new_database_migrates_without_django_q_installed(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(SQLITE_PATH=str(tmp_path / "fresh.sqlite3"), DJANGO_SETTINGS_MODULE="agentops.settings",
               AGENTOPS_VAR_DIR=str(tmp_path / "var"))
    # A fresh Python's Django start-up (tens of seconds on CI), then every installed app's
    # migrations from nothing on a new SQLite file, and the check after them.
    done = subprocess.run([sys.executable, "-c", MIGRATE_WITHOUT_DJANGO_Q], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.django_db(transaction=True)
def test_an_older_databases_retention_schedule_is_forgotten_and_its_table_kept():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE django_q_schedule (id integer PRIMARY KEY, func text)")
        cursor.executemany("INSERT INTO django_q_schedule (id, func) VALUES (%s, %s)",
                           [(1, "runs.retention.prune_task"),
                            (2, "runs.storage.retention.prune_task"), (3, "app.own_task")])
    try:
        with connection.schema_editor() as editor:
            FORGET.forget_schedule(None, editor)
        with connection.cursor() as cursor:
            cursor.execute("SELECT func FROM django_q_schedule")
            assert [row[0] for row in cursor.fetchall()] == ["app.own_task"]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE django_q_schedule")
    with connection.schema_editor() as editor:  # and where there is no such table
        FORGET.forget_schedule(None, editor)
