"""Production settings, in fresh processes with the variables a deployment sets:
`manage.py check --deploy` reports nothing (a warning silenced in settings must say why
there), a weak or missing SECRET_KEY stops the process, the answers carry HSTS, Secure
cookies and the Content-Security-Policy, and the sandbox is not mounted unless asked for.
Local mode (no variables: bin/serve, the tests) keeps the sandbox and plain-HTTP cookies.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import COMMAND_DEADLINE

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_VARIABLES = ("SECRET_KEY", "ALLOWED_HOSTS", "DEBUG", "SECURE_PROXY_SSL_HEADER",
                    "AGENTOPS_SANDBOX", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
                    "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_PRELOAD",
                    "SECURE_HSTS_INCLUDE_SUBDOMAINS", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")


def environment(tmp_path, **variables) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DEPLOY_VARIABLES}
    env.update(AGENTOPS_VAR_DIR=str(tmp_path), SQLITE_PATH=str(tmp_path / "db.sqlite3"),
               DJANGO_SETTINGS_MODULE="agentops.settings", **variables)
    return env


def production(tmp_path, **variables) -> dict:
    return environment(tmp_path, **{"SECRET_KEY": secrets.token_urlsafe(50),
                                    "ALLOWED_HOSTS": "agentops.example.com",
                                    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
                                    "DEBUG": "0", **variables})


def manage(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=COMMAND_DEADLINE)


PROBE = """
import json
from django.test import Client
from django.urls import Resolver404, resolve
def mounted(path):
    try:
        resolve(path)
        return True
    except Resolver404:
        return False
secure = Client(HTTP_HOST="agentops.example.com", HTTP_X_FORWARDED_PROTO="https")
page = secure.get("/login/")
plain = Client(HTTP_HOST="agentops.example.com").get("/login/")
print(json.dumps({"status": page.status_code, "headers": dict(page.headers),
                  "csrf_cookie": str(page.cookies.get("csrftoken")),
                  "plain": [plain.status_code, plain.get("Location")],
                  "sandbox": [mounted(p) for p in ("/sandbox/api/reset",
                              "/sandbox/site/generation/bump", "/sandbox/api/records")]}))
"""


def probe(env) -> dict:
    result = manage(env, "shell", "-c", PROBE)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_check_deploy_reports_nothing_with_production_variables(tmp_path):
    result = manage(production(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr and "?:" not in result.stderr, result.stderr


def test_every_silenced_check_is_explained_in_settings(tmp_path):
    result = manage(production(tmp_path), "shell", "-c",
                    "from django.conf import settings; print(settings.SILENCED_SYSTEM_CHECKS)")
    silenced = re.findall(r"[a-z_]+\.[WE]\d+", result.stdout)
    comments = "\n".join(line for line in (ROOT / "agentops/settings.py").read_text()
                         .splitlines() if line.strip().startswith("#"))
    for check in silenced:
        assert check.split(".")[1] in comments, f"{check} is silenced without a reason"


@pytest.mark.parametrize("key", ["", "short", "x" * 60, "django-insecure-" + "a1b2c3" * 10])
def test_a_deployment_refuses_to_start_without_a_real_secret_key(tmp_path, key):
    env = production(tmp_path, SECRET_KEY=key) if key else environment(
        tmp_path, ALLOWED_HOSTS="agentops.example.com")
    result = manage(env, "check")
    assert result.returncode != 0
    assert "needs SECRET_KEY" in result.stderr


def test_production_answers_carry_hsts_secure_cookies_and_the_csp(tmp_path):
    found = probe(production(tmp_path))
    headers = found["headers"]
    assert found["status"] == 200
    assert headers["Strict-Transport-Security"].startswith("max-age=31536000")
    assert "includeSubDomains" in headers["Strict-Transport-Security"]
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp
    assert "; secure" in found["csrf_cookie"].lower()
    assert found["plain"][0] == 301 and found["plain"][1].startswith("https://")
    assert found["sandbox"] == [False, False, False]


def test_the_sandbox_is_an_explicit_choice_in_a_deployment(tmp_path):
    assert probe(production(tmp_path, AGENTOPS_SANDBOX="1"))["sandbox"] == [True, True, True]


def test_local_mode_needs_no_variable_and_keeps_the_sandbox(tmp_path):
    found = probe(environment(tmp_path))
    assert found["sandbox"] == [True, True, True]
    assert "; secure" not in found["csrf_cookie"].lower()  # plain HTTP on 127.0.0.1
    assert "Strict-Transport-Security" not in found["headers"]
    assert "unsafe-inline" not in found["headers"]["Content-Security-Policy"]
