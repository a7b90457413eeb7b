"""The conversation view of a chat run, and messages sent to it (runs/chat/)."""

import pytest
from django.urls import reverse

import tests.web.chat_agent  # noqa: F401  (registers echo_chat)
from runs.chat.models import MAX_MESSAGE_CHARS, ChatMessage
from runs.chat.services import deliver_queued
from runs.models import Run
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat_run(launch_and_drive):
    run = launch_and_drive("echo_chat", {"first": "hello there"})
    assert run.status == "waiting"
    return run


def chat(client, run, **data):
    return client.post(reverse("runs:chat", args=[run.pk]), data, HTTP_HX_REQUEST="true")


def test_the_run_page_shows_the_conversation_in_order(alice_client, chat_run):
    response = alice_client.get(chat_run.get_absolute_url())
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="conversation"' in body and 'id="chat-form"' in body
    roles = [m["role"] for m in response.context["conversation"]["messages"]]
    assert roles == ["system", "user", "assistant", "assistant"]
    tool_call = response.context["conversation"]["messages"][2]["calls"][0]
    assert tool_call["name"] == "look_up" and tool_call["result"]["collapsed"]
    assert body.index("hello there") < body.index("you said: hello there")
    assert "<details class=\"chat-block\">" in body  # the long result starts collapsed
    assert 'id="panel-input"' in body and "The run is waiting for you" not in body
    # the answer was streamed, and its step checkpointed since: the transcript has it
    assert chat_run.events.filter(kind="stream").exists()
    assert response.context["stream_events"] == []


def test_a_follow_up_answers_the_wait_and_the_reply_follows(alice_client, chat_run):
    response = chat(alice_client, chat_run, text="  and now?  ")
    assert response.status_code == 200
    message = ChatMessage.objects.get(run=chat_run)
    assert (message.state, message.text) == (ChatMessage.DELIVERED, "and now?")
    run = drive(chat_run.pk)
    assert run.status == "waiting"
    messages = alice_client.get(run.get_absolute_url()).context["conversation"]["messages"]
    assert [m["text"] for m in messages if m["role"] == "assistant" and m["text"]] == \
        ["you said: hello there", "you said: and now?"]


def test_a_message_sent_while_the_run_is_busy_waits_for_its_next_wait(
        alice_client, users):
    from runs import services

    run = services.run_launch(user=users["alice"], agent="echo_chat", inputs={"first": "one"})
    response = chat(alice_client, run, text="two")
    assert response.status_code == 200
    assert "queued for the run" in response.content.decode()
    assert ChatMessage.objects.get(run=run).state == ChatMessage.QUEUED
    run = drive(run.pk)  # to its first wait, which the queued message answers at once
    assert run.status == "queued"
    assert ChatMessage.objects.get(run=run).state == ChatMessage.DELIVERED
    assert not deliver_queued(run.pk)  # delivered once
    run = drive(run.pk)
    texts = [m["content"] for m in run.checkpoints.order_by("-number").first().state()["messages"]
             if m["role"] == "user"]
    assert texts == ["one", "two"]


def test_ending_the_chat_finishes_the_run(alice_client, chat_run):
    assert chat(alice_client, chat_run, end="1").status_code == 200
    assert drive(chat_run.pk).status == "succeeded"
    response = chat(alice_client, chat_run, text="more?")
    assert response.status_code == 409
    assert "takes no more messages" in response.content.decode()


@pytest.mark.parametrize("data, error", [
    ({"text": ""}, "Type a message first."),
    ({"text": "   "}, "Type a message first."),
    ({"text": "x" * (MAX_MESSAGE_CHARS + 1)}, f"at most {MAX_MESSAGE_CHARS} characters"),
    ({"text": "bad\x00byte"}, "Null characters are not allowed."),
])
def test_bad_messages_are_refused_with_a_clear_error(alice_client, chat_run, data, error):
    response = chat(alice_client, chat_run, **data)
    assert response.status_code == 422
    assert error in response.content.decode()
    assert not ChatMessage.objects.exists()
    assert Run.objects.get(pk=chat_run.pk).status == "waiting"


def test_html_in_a_message_is_shown_as_text(alice_client, chat_run):
    chat(alice_client, chat_run, text="<script>alert(1)</script><b>bold</b>")
    run = drive(chat_run.pk)
    body = alice_client.get(run.get_absolute_url()).content.decode()
    assert "<script>alert(1)" not in body and "<b>bold</b>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in body


def test_only_the_owner_writes_and_only_to_a_chat(client_for, chat_run, launch_and_drive):
    assert chat(client_for("bob"), chat_run, text="hi").status_code == 404  # not theirs
    charlie = chat(client_for("charlie"), chat_run, text="hi")  # an operator sees it
    assert charlie.status_code == 409 and "Only the run&#x27;s owner" in charlie.content.decode()
    ticker = launch_and_drive("ticker", {"steps": 1, "delay": 0})
    refused = chat(client_for("alice"), ticker, text="hi")
    assert refused.status_code == 409
    assert not ChatMessage.objects.exists()
    assert client_for("alice").get(reverse("runs:chat", args=[chat_run.pk])).status_code == 405
