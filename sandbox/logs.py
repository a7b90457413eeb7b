"""The sandbox stays out of the console: its requests are the simulated outside world
(a crawl makes thousands, a flaky page answers 503 on purpose), and among them the
lines of the app's own processes ("worker 12208 died ...") could not be read.

- Daphne's access log leaves out requests under /sandbox/ (sandbox/daphne.py, the
  Procfile's web process) unless AGENTOPS_SANDBOX_ACCESS_LOG=1.
- django.request's line about a response the sandbox chose (a simulated 503, the 404 of
  a broken page, a 400 of a bad parameter) is dropped: the access log, when on, says it
  in one line. An exception inside the sandbox still logs with its traceback: that is a
  bug, not the simulation.

No Django import: LOGGING loads this before the apps."""

from __future__ import annotations

import logging
import os

# Where agentops/urls.py mounts the sandbox.
PREFIX = "/sandbox/"


def access_log_on() -> bool:
    return os.environ.get("AGENTOPS_SANDBOX_ACCESS_LOG", "").strip().lower() in (
        "1", "true", "yes", "on")


def is_sandbox_path(path: str) -> bool:
    return path.startswith(PREFIX)


class SandboxAnswers(logging.Filter):
    """On django.request: drop the lines about the sandbox's own answers."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if record.exc_info is not None or request is None:
            return True
        return not is_sandbox_path(getattr(request, "path", "") or "")
