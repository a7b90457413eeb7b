"""The data both sides of a scenario handle: the same bytes for agentops and its peer."""

from __future__ import annotations

import random

WORDS = ("agent", "tool", "call", "result", "state", "plan", "step", "memory", "search",
         "page", "fetch", "summary", "user", "assistant", "answer", "question", "context",
         "token", "model", "retry", "error", "value", "record", "table", "index", "query",
         "write", "read", "update", "durable", "checkpoint", "effect", "resume", "worker",
         "lease", "epoch", "branch", "replay", "log", "event", "status", "output", "input",
         "schema", "graph", "node", "edge", "message", "history", "prompt", "reply", "draft",
         "final", "review", "check", "test", "data", "file")


def message(n: int, size: int = 500) -> dict:
    """A chat message of about `size` bytes of word-like text (it compresses about as
    well as prose does), different for every n."""
    rng = random.Random(n)
    words, length = [], 0
    while length < size:
        word = rng.choice(WORDS) + str(rng.randrange(1000))
        words.append(word)
        length += len(word) + 1
    return {"role": "assistant" if n % 2 else "user", "content": " ".join(words)[:size]}


def chunk(n: int, size: int = 1024) -> str:
    """`size` characters that do not compress much (hex of random bytes), different for every n."""
    return random.Random(n).randbytes(size // 2).hex()
