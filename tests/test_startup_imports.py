"""What a process pays to start: the worker tree's main imports Django, the apps and the
agents before it forks, and the suite and a deploy start hundreds of them. Packages that
only a web request needs stay out of it (runs/api/docs.py: not "ninja" as an installed
app, which imported django-ninja and pydantic into every process, 0.2 CPU-s and 12 MiB)."""

import json
import subprocess
import sys

from tests.support.processes import ROOT

WEB_ONLY = {"ninja", "pydantic", "pydantic_core"}
# The HTTP client, imported by the first HTTP tool call or webhook delivery of a process
# (builtin_agents/tools/http.py): 137 modules and 8.6 MiB with its command-line client's
# packages installed, as they are here (the test extras bring rich and click).
ON_FIRST_REQUEST = {"httpx", "httpx_sse", "httpcore", "rich", "click", "pygments"}


def started_packages(*others: str) -> list[str]:
    """The packages of `ON_FIRST_REQUEST | WEB_ONLY` that a process has imported once it
    is set up as a worker tree's main before it forks (and has imported `others`)."""
    probe = ("import sys, django; django.setup(); "
             "import runs.management.commands.worker, runs.worker.tree, runs.worker.execute; "
             "import runs.worker.sweep; runs.worker.sweep.Duties(); "
             + "".join(f"import {name}; " for name in others)
             + "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules}"
             f".intersection({sorted(WEB_ONLY | ON_FIRST_REQUEST)!r}))))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "agentops.settings"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, text=True,
                         capture_output=True, check=True).stdout
    return json.loads(out)


def test_a_worker_tree_starts_without_the_web_apis_nor_the_http_clients_packages():
    assert started_packages() == []


def test_the_http_client_is_there_once_a_tool_asks_for_it():
    """The probe sees an import when there is one: the first request's own."""
    assert "httpx" in started_packages("httpx")
