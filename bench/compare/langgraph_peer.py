"""LangGraph with langgraph-checkpoint-postgres's PostgresSaver, the peer of scenarios 3
and 4: a StateGraph whose one node loops, saving a checkpoint after every step with
`durability="sync"` (the write is done before the next step starts, as ours is).

Its tables live in schema `langgraph` of the bench database.
"""

from __future__ import annotations

import contextlib
import operator
import time
import uuid
from contextlib import ExitStack
from typing import Annotated, TypedDict

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

from bench.compare.workload import chunk, message

SCHEMA = "langgraph"
TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


class ChatState(TypedDict):
    messages: Annotated[list, operator.add]  # the usual chat history: a reducer appends
    n: int


class BigState(TypedDict):
    chunks: list
    i: int
    n: int


def _chat(state: ChatState) -> dict:
    return {"messages": [message(len(state["messages"]))]}


def _chat_route(state: ChatState) -> str:
    return END if len(state["messages"]) >= state["n"] else "chat"


def _big(state: BigState) -> dict:
    chunks = list(state["chunks"])
    i = state["i"]
    chunks[i % len(chunks)] = chunk(10_000_000 + i)
    return {"chunks": chunks, "i": i + 1}


def _big_route(state: BigState) -> str:
    return END if state["i"] >= state["n"] else "step"


class LangGraphPeer:
    def __init__(self, url: str):
        self.url = url
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        self.open()

    def open(self) -> None:
        """Connect (again: after a database restart the old connection is gone)."""
        self._stack = ExitStack()
        self.saver = self._stack.enter_context(
            PostgresSaver.from_conn_string(f"{self.url}?options=-csearch_path%3D{SCHEMA}"))
        self.saver.setup()
        chat = StateGraph(ChatState)
        chat.add_node("chat", _chat)
        chat.add_edge(START, "chat")
        chat.add_conditional_edges("chat", _chat_route)
        self.chat = chat.compile(checkpointer=self.saver)
        big = StateGraph(BigState)
        big.add_node("step", _big)
        big.add_edge(START, "step")
        big.add_conditional_edges("step", _big_route)
        self.big = big.compile(checkpointer=self.saver)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a connection the server already dropped
            self._stack.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    def _invoke(self, graph, inputs: dict, steps: int) -> float:
        config = {"configurable": {"thread_id": uuid.uuid4().hex},
                  "recursion_limit": steps + 10}
        start = time.perf_counter()
        graph.invoke(inputs, config, durability="sync")
        return time.perf_counter() - start

    def run_chat(self, steps: int) -> float:
        """Seconds for `steps` chat steps, each checkpointed before the next."""
        return self._invoke(self.chat, {"messages": [], "n": steps}, steps)

    def run_big(self, steps: int, chunks: int) -> float:
        state = {"chunks": [chunk(k) for k in range(chunks)], "i": 0, "n": steps}
        return self._invoke(self.big, state, steps)

    def table_names(self) -> list[str]:
        return [f"{SCHEMA}.{t}" for t in TABLES]
