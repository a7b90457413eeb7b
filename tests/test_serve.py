"""`bin/serve` as a new user runs it: on the port they chose (PORT), with the
built-in agents pointed at that port's sandbox, every built-in agent on the launch page
(the SDK examples too), a console the sandbox does not flood, a worker tree started
afresh when it ends damaged, and stopped by SIGTERM with a page's live socket open: the
socket is closed with the service-restart code (the page reconnects to the next server)
and everything ends within seconds.

It runs the script itself (setup, migrate, collectstatic, the first login, the
Procfile's two commands) on a SQLite file of its own, whatever the test pass.
Besides: what bin/setup installs, what a non-editable install carries, and the
sandbox's lines in the web process's log.
"""

from __future__ import annotations

import html
import logging
import os
import re
import shutil
import signal
import subprocess
import sys

import httpx
import psutil
import pytest

from runs.live.shutdown import CLOSE_NOT_ANSWERED, CLOSE_SERVICE_RESTART
from sandbox.logs import SandboxAnswers
from tests.support.live_sockets import close_codes
from tests.support.processes import (
    COMMAND_DEADLINE,
    ROOT,
    TREE_DEADLINE,
    Managed,
    free_port,
    process_env,
    wait_until,
)

pytestmark = pytest.mark.sqlite  # bin/serve is the SQLite default (tests/conftest.py)

# Hang bounds, not speed claims: a clean stop waits on nothing, and a stop that waits on
# a page's reply says so (CLOSE_NOT_ANSWERED, asserted absent below). On CI's loaded cores
# Daphne's exit alone, after the sockets are closed, once took more than 3 s.
WEB_STOPS_DEADLINE = 30.0
ALL_STOP_DEADLINE = 60.0  # the worker hands its runs back first


def serve(tmp_path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "AGENTOPS_SANDBOX_URL")}
    env.update(PORT=str(port), SQLITE_PATH=str(tmp_path / "serve.sqlite3"),
               STATIC_ROOT=str(tmp_path / "static"), AGENTOPS_WORKERS="1",
               AGENTOPS_VAR_DIR=str(tmp_path / "var"))
    return subprocess.Popen([str(ROOT / "bin" / "serve")], cwd=ROOT, env=env,
                            stdout=open(tmp_path / "serve.log", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def log_in(client: httpx.Client, output: str) -> None:
    username, password = re.search(r"log in as\s+(\S+) / (\S+)", output).groups()
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = client.post("/login/", data={"username": username, "password": password,
                                            "csrfmiddlewaretoken": token})
    assert response.status_code == 302, response.text[:500]


def form_fields(page: str) -> dict[str, str]:
    form = page[page.index('class="card launch-form"'):]
    form = form[:form.index("</form>")]
    fields = re.findall(r'<input [^>]*name="([^"]+)" value="([^"]*)"', form)
    fields += re.findall(r'<textarea [^>]*name="([^"]+)"[^>]*>([^<]*)</textarea>', form)
    return {name: html.unescape(value.strip("\n")) for name, value in fields}


def launch(client: httpx.Client, agent: str, **values) -> str:
    fields = form_fields(client.get(f"/launch/{agent}/").text)
    fields.update(values)
    launched = client.post(f"/launch/{agent}/", data=fields)
    assert launched.status_code == 302, launched.text[:2000]
    return re.search(r"/runs/([0-9a-f]{32})/", launched.headers["location"]).group(1)


def up(client: httpx.Client) -> bool:
    try:
        return client.get("/login/").status_code == 200
    except httpx.TransportError:
        return False


def titled(serve: subprocess.Popen, title: str) -> list[psutil.Process]:
    """bin/serve's live descendants whose title (runs/worker/roles.py) is `title` (the
    main's is followed by its watcher's arguments: runs/worker/watcher.py)."""
    found, wanted = [], title.split()
    for process in psutil.Process(serve.pid).children(recursive=True):
        try:
            words = " ".join(process.cmdline()).split()
            if words[:len(wanted)] == wanted and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def exited(process: psutil.Process) -> bool:
    """Gone, or a zombie (its parent, bin/serve, reaps it as it likes)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_bin_serve_on_its_port_and_a_clean_stop(tmp_path):
    port = free_port()
    proc = serve(tmp_path, port)
    base = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=base, timeout=30)
    try:
        def output():
            return (tmp_path / "serve.log").read_text(errors="replace")

        # bin/setup first (a pip install if the venv lacks this pyproject's stamp: about a
        # minute from a clean venv), then migrate, collectstatic and the first login, each a
        # fresh Django start-up (tens of seconds on CI), then Daphne's own
        wait_until(lambda: up(client) or proc.poll() is not None, 300,
                   message="bin/serve to answer")
        assert proc.poll() is None, output()[-3000:]
        log_in(client, output())

        # every built-in agent is on the launch page, the SDK examples too (bin/setup
        # installs the adapters extra)...
        offered = set(re.findall(r'href="/launch/([\w-]+)/"', client.get("/launch/").text))
        assert {"crawl", "migrate", "assistant", "pydantic_assistant",
                "openai_assistant"} <= offered, offered
        # ...the launch form points the agent at this port's sandbox...
        fields = form_fields(client.get("/launch/crawl/").text)
        assert fields["site_url"] == f"{base}/sandbox/site"
        # (a flaky site: the sandbox answers a third of the first requests with a 503)
        run_ids = [launch(client, "crawl", pages="12", error_rate="0.34", latency_ms="0"),
                   launch(client, "pydantic_assistant", latency_ms="0")]

        # ...and the worker reaches it: the crawl and the SDK agent succeed
        def finished(run_id):
            page = client.get(f"/runs/{run_id}/").text
            return re.search(r'badge status-(succeeded|failed|needs_attention)', page)

        # a crawl whose first requests fail a third of the time (each retried) and an SDK
        # agent's model and tool calls, on a tree just started, on CI's loaded cores
        for run_id in run_ids:
            ended = wait_until(lambda run_id=run_id: finished(run_id), 120,
                               message=f"run {run_id} to finish")
            assert ended.group(1) == "succeeded", output()[-3000:]
        run_id = run_ids[0]

        # The console shows the app's own lines, not the sandbox's requests nor its
        # deliberate 503s (a setting turns its access log on: test_sandbox_lines below).
        # (A database fault in the sandbox is the app's own line, and may be logged.)
        console = output()
        assert '"POST /launch/crawl/" 302' in console
        noise = [line for line in console.splitlines()
                 if re.search(r'"[A-Z]+ /sandbox/|django\.request .*/sandbox/', line)]
        assert noise == [], noise[:5]
        assert "Traceback" not in console, console[-3000:]
        assert console.count("log in as") == 1

        # The worker tree is crash-only: its main killed, bin/serve starts a fresh tree.
        [main] = titled(proc, "agentops main")
        main.kill()
        wait_until(lambda: [p.pid for p in titled(proc, "agentops main")] not in ([], [main.pid])
                   and titled(proc, "agentops worker-1"), TREE_DEADLINE,
                   message="a fresh worker tree")
        assert "the worker tree ended (exit 137): starting a fresh one" in output()  # 128+9

        # SIGTERM with the run page's socket open (and a keep-alive HTTP connection)
        daphne = [p for p in psutil.Process(proc.pid).children(recursive=True)
                  if "daphne" in " ".join(p.cmdline())]
        assert daphne, "no Daphne under bin/serve"
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        codes = close_codes(port, cookie, {f"/ws/runs/{run_id}/": {"type": "hello", "after": 0}},
                            lambda: proc.send_signal(signal.SIGTERM))
        assert codes == [CLOSE_SERVICE_RESTART]
        try:
            wait_until(lambda: all(map(exited, daphne)), WEB_STOPS_DEADLINE)
        except AssertionError:
            raise AssertionError(f"Daphne still running after SIGTERM:\n{output()[-3000:]}") from None
        try:
            proc.wait(ALL_STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"bin/serve still running:\n{output()[-3000:]}") from None
        assert CLOSE_NOT_ANSWERED not in output(), output()[-3000:]
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def fake_venv(root, *, uv: bool) -> None:
    """A .venv whose pip (and uv, if `uv`) writes down what it was asked (bin/setup keeps an
    existing one); without a uv, pip's `install uv` installs nothing, as where uv cannot be
    had."""
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\n")
    names = ("python", "pip", "uv") if uv else ("python", "pip")
    for name in names[1:]:
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {root / "installs.log"}\n')
    for name in names:
        (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize("uv", [True, False], ids=["uv", "pip only"])
def test_bin_setup_installs_the_sdk_examples_extra(tmp_path, uv):
    """bin/serve's set-up installs the adapters extra: the built-in SDK examples
    (pydantic_assistant, openai_assistant) need it, and it goes in before the app runs
    (installed under a running app, a launched run met a worker that lacked the agent).
    It installs through uv where it can get it, else through pip."""
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "bin" / "setup", tmp_path / "bin" / "setup")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    fake_venv(tmp_path, uv=uv)
    log = tmp_path / "installs.log"

    def installs(*args) -> list[str]:
        before = log.read_text() if log.exists() else ""
        # a shell script and stubs: well under a second; this bounds a hang only
        subprocess.run([str(tmp_path / "bin" / "setup"), *args], cwd=tmp_path, check=True,
                       timeout=60)
        return log.read_text()[len(before):].splitlines()

    def install(extras: str) -> str:
        if uv:
            return (f"uv pip install -q --compile-bytecode --python .venv/bin/python "
                    f"-e .[{extras}]")
        return f"pip install -q -e .[{extras}]"

    first = installs()
    assert first[0] == "pip install -q uv"
    assert install("adapters") in first
    assert not any(" -e " in line for line in first if line != install("adapters"))
    assert installs() == []  # done once (until pyproject.toml changes)
    assert install("test,adapters") in installs("test")


def test_a_non_editable_install_has_every_app_and_the_site_files(tmp_path):
    """What `pip install .` puts into site-packages (built by setuptools' build_py, as the
    wheel is, with this venv's setuptools: offline, in seconds) runs without the
    checkout: every installed app imports (builtin_agents too), `check` passes, and the
    site's and the sandbox's templates and static files are found inside the install."""
    lib = tmp_path / "lib"
    # setuptools copies every package's files: seconds, more on CI's loaded cores
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                            str(lib)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env.update(PYTHONPATH=str(lib), DJANGO_SETTINGS_MODULE="agentops.settings",
               AGENTOPS_VAR_DIR=str(tmp_path / "var"), STATIC_ROOT=str(tmp_path / "static"))
    script = """
import django
django.setup()
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.template.loader import get_template
import agentops, builtin_agents, runs, sandbox
from runs.durable import registry
call_command("check")
for module in (agentops, builtin_agents, runs, sandbox):
    print("module", module.__file__)
for name in ("base.html", "sandbox/report.html"):
    print("template", get_template(name).origin.name)
for name in ("css/app.css", "sandbox/report.css"):
    print("static", finders.find(name))
print("agents", *registry.names())
"""
    ran = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=COMMAND_DEADLINE)
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    found = [line.split(" ", 1)[1] for line in lines
             if line.split(" ")[0] in ("module", "template", "static")]
    assert len(found) == 8 and all(path.startswith(str(lib)) for path in found), lines
    agents = next(line for line in lines if line.startswith("agents")).split()
    assert {"crawl", "migrate", "assistant"} <= set(agents), agents


SANDBOX_REQUESTS = [  # (method, path, headers): each answered on purpose with an error
    ("GET", "/sandbox/site/page/1?pages=20&latency_ms=0&error_rate=1", {}),  # a flaky page
    ("POST", "/sandbox/api/records", {"Idempotency-Key": "k-1", "X-Sandbox-Fail": "before"}),
    ("GET", "/sandbox/site/page/99?pages=20&latency_ms=0", {}),              # past the site
    ("GET", "/sandbox/site/page/1?pages=none", {}),                          # a bad parameter
]


@pytest.mark.parametrize("access_log", [False, True])
def test_sandbox_lines_in_the_web_process_log(transactional_db, tmp_path, access_log):
    """The Procfile's web process (python -m sandbox.daphne) writes no line for the
    sandbox's requests, its deliberate 503s included, unless AGENTOPS_SANDBOX_ACCESS_LOG=1;
    then one line each, the access log's. Never a traceback; the app's own requests are
    logged as before."""
    port = free_port()
    env = process_env(AGENTOPS_LOG_FORMAT="text",
                      AGENTOPS_SANDBOX_ACCESS_LOG="1" if access_log else "0")
    web = Managed([sys.executable, "-m", "sandbox.daphne", "-b", "127.0.0.1", "-p", str(port),
                   "agentops.asgi:application"], env, tmp_path / "web.log")
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        # a new Python that sets Django up before Daphne listens: tens of seconds on CI
        wait_until(lambda: up(client) or not web.alive(), 60, message="the web process")
        for method, path, headers in SANDBOX_REQUESTS:
            body = b'{"a": 1}' if method == "POST" else None
            answer = client.request(method, path, headers=headers, content=body)
            assert answer.status_code in (400, 404, 503), (path, answer.status_code)
        assert client.get("/no-such-page/").status_code == 404
        # the app's own line, written after the sandbox's: every earlier line is in
        wait_until(lambda: '"GET /no-such-page/" 404' in web.output(), 30,
                   message="the app's access line")
    finally:
        web.stop()
    console = web.log_path.read_text(errors="replace")
    lines = [line for line in console.splitlines() if "/sandbox/" in line]
    assert "Traceback" not in console
    if access_log:
        assert len(lines) == len(SANDBOX_REQUESTS), lines
        assert all(re.search(r'" (400|404|503) ', line) for line in lines), lines
    else:
        assert lines == []


def test_an_exception_in_the_sandbox_still_logs_with_its_traceback():
    class Request:
        path = "/sandbox/api/records"

    def record(exc_info):
        made = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal "
                                 "Server Error: %s", (Request.path,), exc_info)
        made.request = Request()
        return made

    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        failure = sys.exc_info()
    assert SandboxAnswers().filter(record(failure))
    assert not SandboxAnswers().filter(record(None))  # an answer the sandbox chose
