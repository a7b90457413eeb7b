"""What a process pays to start: the worker tree's main imports Django, the apps and the
agents before it forks, and the suite and a deploy start hundreds of them. Packages that
only a web request needs stay out of it (runs/api/docs.py: not "ninja" as an installed
app, which imported django-ninja and pydantic into every process, 0.2 CPU-s and 12 MiB)."""

import subprocess
import sys

from tests.support.processes import ROOT

WEB_ONLY = {"ninja", "pydantic", "pydantic_core"}


def test_a_worker_tree_starts_without_the_web_apis_packages():
    probe = ("import sys, django; django.setup(); "
             "import runs.management.commands.worker, runs.worker.tree, runs.worker.execute; "
             f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {WEB_ONLY!r}))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "agentops.settings"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, text=True,
                         capture_output=True, check=True).stdout
    assert out.strip() == "[]"
