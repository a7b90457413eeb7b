"""The README's and docs/api.md's examples, run as written against a real Daphne and a
real worker: the curl lines through bash, the Python client's blocks as scripts, the
remote command line through `manage.py runs`. Each is read from its file at test time,
so an edited example is the one tested. Only the token, the run id and the host and
port are substituted (the server serves its own sandbox, where the built-in agents'
defaults point)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from runs.api import tokens
from runs.models import Run
from tests.support.processes import ROOT, Server, free_port, wait_until

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(600)]

README_HOST = "http://127.0.0.1:8000"
DOCS_HOST = "https://agentops.example"
DOCS_RUN_ID = "3f2a9c..."
RUN_ENDS_WITHIN = 120  # a crawl of 20-50 pages or a short chat, on a loaded machine


def code_blocks(path: str, heading: str) -> list[tuple[str, str]]:
    """The fenced blocks (language, text) of the section under `heading`."""
    text = (ROOT / path).read_text()
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    end = text.find(f"\n{level} ", start + len(heading) + 2)
    section = text[start:end if end > 0 else None]
    return re.findall(r"^```(\w+)\n(.*?)^```", section, re.M | re.S)


def commands(block: str) -> list[str]:
    """A shell block's commands, continuation lines joined."""
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def expected_exit(line: str) -> int:
    """What the example's own comment says it exits with (0 unless it says "exits N")."""
    said = re.search(r"#.*\bexits (\d+)", line)
    return int(said.group(1)) if said else 0


@pytest.fixture(scope="module")
def _daphne(django_db_setup, tmp_path_factory):
    port = free_port()
    server = Server(tmp_path_factory.mktemp("readme"), port=port,
                    AGENTOPS_SANDBOX_URL=f"http://127.0.0.1:{port}/sandbox")
    yield server
    server.stop()


@pytest.fixture
def stack(transactional_db, _daphne, start_cluster):
    """A Daphne serving the app and its sandbox, and a worker, as bin/serve runs them."""
    if not _daphne.alive():
        pytest.fail(f"daphne died:\n{_daphne.output()[-3000:]}")
    start_cluster(workers=1, AGENTOPS_SANDBOX_URL=f"{_daphne.url}/sandbox")
    return _daphne


@pytest.fixture
def token(users):
    """A token of every scope, as the README says to make, of an operator (charlie)."""
    return tokens.create(users["charlie"], name="readme", scopes=["read", "launch", "operate"],
                         days=30, max_days=365)[1]


def run_python(block: str, host: str, url: str, token: str, tmp_path,
               token_text: str | None = None) -> str:
    """Run a client example as a script: `host` becomes the server's URL, and the token
    is the TOKEN the README assumes (or replaces `token_text`, docs/api.md's "aop_...")."""
    code = block.replace(host, url)
    if token_text:
        code = code.replace(token_text, token)
    script = tmp_path / "example.py"
    script.write_text(f"TOKEN = {token!r}\n{code}")
    # the example's run (RUN_ENDS_WITHIN), and a minute more for the script's start-up
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=RUN_ENDS_WITHIN + 60)
    assert result.returncode == 0, f"{code}\n--- stdout\n{result.stdout}\n--- stderr\n" \
                                   f"{result.stderr}"
    return result.stdout


def curl(command: str, env: dict, tmp_path) -> tuple[int, str]:
    """Run a curl line through bash; ~/.curlrc makes curl print the HTTP status last."""
    (tmp_path / ".curlrc").write_text('silent\nshow-error\nwrite-out = "\\n%{http_code}\\n"\n')
    result = subprocess.run(["bash", "-c", command], env={**env, "CURL_HOME": str(tmp_path)},
                            capture_output=True, text=True, timeout=RUN_ENDS_WITHIN)
    assert result.returncode == 0, f"{command}\n{result.stderr}"
    body, _, status = result.stdout.rstrip("\n").rpartition("\n")
    return int(status), body


def succeeded(run_id: str) -> bool:
    status = Run.objects.get(pk=run_id).status
    assert status not in ("failed", "cancelled", "needs_attention"), status
    return status == "succeeded"


def test_the_readme_api_examples(stack, token, tmp_path):
    blocks = code_blocks("README.md", "## The HTTP API and the Python client")
    shell = [text for lang, text in blocks if lang == "sh"]
    python = [text for lang, text in blocks if lang == "python"]
    assert len(shell) == 1 and len(python) == 1, "the README shows curl and the client"
    launch, stream = commands(shell[0])
    env = {**os.environ, "TOKEN": token}

    status, body = curl(launch.replace(README_HOST, stack.url), env, tmp_path)
    assert status == 202, body
    run = json.loads(body)
    status, body = curl(stream.replace(README_HOST, stack.url), {**env, "RUN": run["id"]},
                        tmp_path)
    assert status == 200 and "event: end" in body, body
    assert '"status": "succeeded"' in body.split("event: end")[1], body[-2000:]

    printed = run_python(python[0], README_HOST, stack.url, token, tmp_path).splitlines()
    assert Run.objects.count() == 1, "the same key and body give the same run"
    assert printed[-1] == "succeeded"
    assert [int(line.split()[0]) for line in printed[:-1]] == \
        list(range(1, Run.objects.get(pk=run["id"]).event_seq + 1))


def test_the_api_docs_client_example(stack, token, tmp_path):
    blocks = [text for lang, text in code_blocks("docs/api.md", "## The Python client")
              if lang == "python"]
    assert blocks, "docs/api.md shows the client"
    printed = run_python(blocks[0], DOCS_HOST, stack.url, token, tmp_path, "aop_...")
    crawl = Run.objects.get(agent="crawl")
    chat = Run.objects.get(agent="assistant")
    assert "succeeded" in printed.splitlines()
    assert crawl.branch == 3  # rolled back (branch 2), its state edited (branch 3), resumed
    wait_until(lambda: succeeded(crawl.pk) and succeeded(chat.pk), RUN_ENDS_WITHIN,
               message="the crawl and the chat to succeed")
    chat.refresh_from_db()
    asked = [answer["question"] for answer in chat.output["answers"]]
    assert asked == ["Which pages mention a boat?", "And how many mention the river?"]


def test_the_api_docs_remote_command_line(stack, token, monkeypatch):
    blocks = [text for lang, text in code_blocks("docs/api.md", "## The command line, remotely")
              if lang == "sh"]
    assert blocks, "docs/api.md shows the remote command line"
    last_run = None
    for line in commands(blocks[0]):
        words = shlex.split(line, comments=True)
        if words[0] == "export":
            name, _, _ = words[1].partition("=")
            monkeypatch.setenv(name, token)
            continue
        assert words[:3] == ["python", "manage.py", "runs"], line
        args = [stack.url if w == DOCS_HOST else last_run if w == DOCS_RUN_ID else w
                for w in words[3:]]
        out, err = io.StringIO(), io.StringIO()
        try:
            call_command("runs", *args, stdout=out, stderr=err)
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        except CommandError as exc:
            code, err = 1, io.StringIO(str(exc))
        assert code == expected_exit(line), f"{line}\n{out.getvalue()}\n{err.getvalue()}"
        launched = re.match(r"run (\w+) ", out.getvalue())
        if args[args.index("--url") + 2] == "launch" and launched:
            last_run = launched.group(1)
        if expected_exit(line) == 3:
            assert "waits for input: " in out.getvalue(), out.getvalue()
    chat = Run.objects.get(pk=last_run)
    assert chat.agent == "assistant" and chat.status == "succeeded"
    assert len(chat.output["answers"]) == 2
