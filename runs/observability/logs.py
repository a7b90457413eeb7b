"""Log lines that carry their run: JSON for machines, text under bin/serve.

Every record gets run_id, branch, step, effect_key and worker: from the record's own
`extra` when the caller gave them (a sweep or lease line about one run), else from
the context the observer sets around a claim, a step and an effect
(runs/observability/observer.py). Context variables are per thread, and every run
of a worker process executes on a thread of its own, so lines never borrow another
run's context. Imports nothing from Django: LOGGING loads it before the apps.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import socket
import time

FIELDS = ("run_id", "branch", "step", "effect_key", "worker")
_vars = {name: contextvars.ContextVar(f"agentops_{name}", default=None) for name in FIELDS}
_process = {"pid": 0, "worker": ""}

# The attributes every LogRecord has: anything else on a record came from `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName", *FIELDS}


def bind(**values) -> list:
    """Set context fields; returns the tokens for `unbind`."""
    return [(_vars[name], _vars[name].set(value)) for name, value in values.items()]


def unbind(tokens: list) -> None:
    for var, token in reversed(tokens):
        try:
            var.reset(token)
        except ValueError:  # set in another context (a thread pool reused the thread)
            var.set(None)


def process_worker() -> str:
    """host:pid, the default `worker` of a line outside any run."""
    pid = os.getpid()
    if _process["pid"] != pid:
        _process.update(pid=pid, worker=f"{socket.gethostname()}:{pid}")
    return _process["worker"]


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _vars.items():
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        if record.worker is None:
            record.worker = process_worker()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; the context fields are always there (null outside a run)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            line[name] = getattr(record, name, None)
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in line:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """For a person at a terminal: the usual line, then the run's context if any."""

    def __init__(self):
        super().__init__("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = " ".join(f"{name}={getattr(record, name)}" for name in FIELDS[:4]
                           if getattr(record, name, None) is not None)
        return f"{text} [{context}]" if context else text
