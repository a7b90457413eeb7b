"""The scripted OpenAI-compatible model, over real HTTP and offline."""

import json

import pytest

from sandbox.openai_wire import ChatRequestError, parse_request
from sandbox.scripted_llm import complete, query_from

URL = "/llm/v1/chat/completions"


def function_tool(name, **params):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in params.items()},
                "required": list(params),
            },
        },
    }


TOOLS = [
    function_tool("search_pages", query="string"),
    function_tool("calculator", expression="string"),
    function_tool("write_note", title="string", body="string"),
]
HITS = {
    "count": 3,
    "hits": [
        {"title": "Page 17: Gold mine", "url": "/sandbox/site/page/17"},
        {"title": "Page 4: Iron"},
        {"title": "Page 9: Coal"},
    ],
}


def run_tool(call):
    """The agent side: the tools, faked just enough."""
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    if name == "search_pages":
        return HITS
    if name == "calculator":
        left, op, right = args["expression"].split()
        assert op == "*"
        return {"result": int(left) * int(right)}
    if name == "write_note":
        assert "Page 17: Gold mine" in args["body"]
        return {"id": "note-41", "title": args["title"]}
    raise AssertionError(name)


def test_a_full_tool_using_conversation_over_http(http):
    messages = [
        {"role": "system", "content": "You are a research assistant."},
        {"role": "user", "content": "How many pages mention the gold mine?"},
    ]
    called = []
    for _ in range(6):
        response = http.post(
            URL, json={"model": "scripted", "messages": messages, "tools": TOOLS, "temperature": 0}
        )
        assert response.status_code == 200, response.text
        completion = response.json()
        assert completion["object"] == "chat.completion"
        assert completion["id"].startswith("chatcmpl-")
        assert completion["usage"]["total_tokens"] > 0
        choice = completion["choices"][0]
        message = choice["message"]
        messages.append(message)
        if choice["finish_reason"] == "stop":
            break
        assert choice["finish_reason"] == "tool_calls"
        for call in message["tool_calls"]:
            assert call["type"] == "function" and call["id"].startswith("call_")
            called.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
            result = run_tool(call)
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    assert called == [
        ("search_pages", {"query": "pages mention gold mine"}),
        ("calculator", {"expression": "3 * 2"}),
        ("write_note", called[2][1]),
    ]
    assert called[2][1]["title"] == "Research: pages mention gold mine"
    answer = messages[-1]["content"]
    assert "6" in answer and "note-41" in answer and "Page 17: Gold mine" in answer
    assert "tool_calls" not in messages[-1]


def test_the_same_messages_give_the_same_response(http):
    body = {"model": "m", "messages": [{"role": "user", "content": "gold"}], "tools": TOOLS}
    first, second = http.post(URL, json=body).json(), http.post(URL, json=body).json()
    first.pop("created"), second.pop("created")
    assert first == second


def test_the_models_endpoint(http):
    listing = http.get("/llm/v1/models").json()
    assert listing["object"] == "list"
    assert listing["data"][0]["id"] == "scripted"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": {}}, "tools"),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "x"}],
            },
            "tools[0]",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3},
            "temperature",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "tool_call_id": "nope", "content": "{}"},
                ],
            },
            "messages[1]",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "rm_rf"}},
            },
            "tool_choice",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_malformed_requests_are_400(http, body, param):
    response = http.post(URL, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


def test_a_body_that_is_not_json_is_400(http):
    response = http.post(URL, content=b"{nope", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "parse the JSON" in response.json()["error"]["message"]


def test_an_api_key_is_required_when_configured(http, monkeypatch):
    monkeypatch.setenv("AGENTOPS_SANDBOX_LLM_KEY", "sk-sandbox")
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert http.post(URL, json=body).status_code == 401
    wrong = http.post(URL, json=body, headers={"Authorization": "Bearer sk-wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert http.get("/llm/v1/models").status_code == 401
    right = http.post(URL, json=body, headers={"Authorization": "Bearer sk-sandbox"})
    assert right.status_code == 200


# --- offline: the script's decisions ---------------------------------------------


def ask(messages, tools=TOOLS, **extra):
    return complete(
        parse_request({"model": "m", "messages": messages, "tools": tools, **extra}), created=0
    )["choices"][0]


def test_it_only_calls_tools_it_was_offered():
    choice = ask([{"role": "user", "content": "gold"}], tools=[TOOLS[1]])
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "expression": "0 * 2"
    }


def test_without_tools_it_answers_at_once():
    choice = ask([{"role": "user", "content": "gold"}], tools=None)
    assert choice["finish_reason"] == "stop"
    assert "gold" in choice["message"]["content"]


def test_tool_choice_none_answers_and_a_named_tool_is_called():
    assert ask([{"role": "user", "content": "x"}], tool_choice="none")["finish_reason"] == "stop"
    forced = ask(
        [{"role": "user", "content": "x"}],
        tool_choice={"type": "function", "function": {"name": "write_note"}},
    )
    assert forced["message"]["tool_calls"][0]["function"]["name"] == "write_note"


def test_a_new_user_message_starts_the_script_again():
    first = ask([{"role": "user", "content": "gold"}])["message"]
    call = first["tool_calls"][0]
    messages = [
        {"role": "user", "content": "gold"},
        first,
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(HITS)},
        {"role": "user", "content": "and iron?"},
    ]
    again = ask(messages)["message"]["tool_calls"][0]
    assert again["function"]["name"] == "search_pages"
    assert json.loads(again["function"]["arguments"]) == {"query": "iron"}


def test_it_reads_plain_text_tool_results():
    messages = [{"role": "user", "content": "gold"}]
    for content in ("page 1\npage 2", "4", "note-7"):
        message = ask(messages)["message"]
        messages += [
            message,
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": content},
        ]
    final = ask(messages)
    assert final["finish_reason"] == "stop"
    assert "2 * 2 = 4" in final["message"]["content"]
    assert "note-7" in final["message"]["content"]
    assert "page 1" in final["message"]["content"]


def test_queries_drop_filler_words():
    assert query_from("What is the price of gold, please?") == "price gold"
    assert query_from("???") == "???"


def test_parse_request_error_carries_the_param():
    with pytest.raises(ChatRequestError) as caught:
        parse_request({"model": "m", "messages": [{"role": "assistant"}]})
    assert caught.value.param == "messages[0]"
