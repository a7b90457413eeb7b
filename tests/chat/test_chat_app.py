"""chat is a Django app of its own (label "chat"), and its messages moved there from the
runs app without a change to their table: a database made before the move keeps every
message, and the app answers a run's wait through the store's hook."""

import pytest
from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.chat.models import ChatMessage
from runs.chat.services import deliver_queued
from runs.hooks import hooks

BEFORE = [("runs", "0053_agent_code_versions"), ("chat", None)]


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def latest(executor: MigrationExecutor) -> list:
    return executor.loader.graph.leaf_nodes()


def test_chat_messages_belong_to_the_chat_app_in_the_table_they_had():
    assert apps.get_app_config("chat").name == "runs.chat"
    assert ChatMessage._meta.app_label == "chat"
    assert ChatMessage._meta.db_table == "runs_chatmessage"
    assert "ChatMessage" not in {m.__name__ for m in apps.get_app_config("runs").get_models()}


def test_the_chat_app_answers_a_wait_through_the_stores_hook():
    assert deliver_queued in hooks.input_wait


@pytest.mark.django_db(transaction=True)
def test_a_database_made_before_the_move_keeps_its_messages(django_user_model):
    executor = migrate(BEFORE)  # the schema as it was: the runs app held ChatMessage
    old = executor.loader.project_state(BEFORE[0]).apps
    assert old.get_model("runs", "ChatMessage")._meta.db_table == "runs_chatmessage"
    user = django_user_model.objects.create_user("dora", password="dora-pass-1")
    run = old.get_model("runs", "Run").objects.create(id="r1", agent="echo_chat",
                                                      agent_version="1")
    old_message = old.get_model("runs", "ChatMessage")
    old_message.objects.create(run_id=run.id, sender_id=user.pk, text="queued one")
    old_message.objects.create(run_id=run.id, text="", end=True, state="delivered")
    # what the database had: the content type too (moved back by the reverse migration)
    kind = ContentType.objects.get(app_label="runs", model="chatmessage")
    with connection.cursor() as cursor:
        tables_before = set(connection.introspection.table_names(cursor))

    migrate(latest(executor))

    rows = list(ChatMessage.objects.order_by("id").values_list("run_id", "sender_id", "text",
                                                               "end", "state"))
    assert rows == [("r1", user.pk, "queued one", False, "queued"),
                    ("r1", None, "", True, "delivered")]
    assert ChatMessage.objects.filter(run_id="r1", state="queued").count() == 1
    with connection.cursor() as cursor:
        assert set(connection.introspection.table_names(cursor)) == tables_before
    kind.refresh_from_db()  # permissions given on chat messages follow them
    assert (kind.app_label, kind.model) == ("chat", "chatmessage")
