"""`bin/serve` as a new user runs it: on the port they chose (PORT), with the
built-in agents pointed at that port's sandbox, and stopped by SIGTERM with a
page's live socket open: the socket is closed with the service-restart code
(the page reconnects to the next server) and everything ends within seconds.

It runs the script itself (setup, migrate, collectstatic, the first login,
honcho with the Procfile) on a SQLite file of its own, whatever the test pass.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

import httpx
import psutil

from runs.live.shutdown import CLOSE_SERVICE_RESTART
from tests.support.live_sockets import close_codes
from tests.support.processes import ROOT, free_port, wait_until

WEB_STOPS_WITHIN_SECONDS = 3.0
ALL_STOP_WITHIN_SECONDS = 5.0  # the worker hands its runs back first (honcho's own limit: 5 s)


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


def form_fields(html: str) -> dict[str, str]:
    form = html[html.index('class="card launch-form"'):]
    form = form[:form.index("</form>")]
    return dict(re.findall(r'<input [^>]*name="([^"]+)" value="([^"]*)"', form))


def up(client: httpx.Client) -> bool:
    try:
        return client.get("/login/").status_code == 200
    except httpx.TransportError:
        return False


def exited(process: psutil.Process) -> bool:
    """Gone, or a zombie. Honcho's shell dies first, so Daphne's exit is reaped by whatever
    adopts it, as late as that process likes (some container inits: not for seconds)."""
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

        wait_until(lambda: up(client) or proc.poll() is not None, 300,
                   message="bin/serve to answer")
        assert proc.poll() is None, output()[-3000:]
        log_in(client, output())

        # the launch form points the agent at this port's sandbox...
        fields = form_fields(client.get("/launch/crawl/").text)
        assert fields["site_url"] == f"{base}/sandbox/site"
        fields.update(pages="12", error_rate="0", latency_ms="0")
        launched = client.post("/launch/crawl/", data=fields)
        assert launched.status_code == 302, launched.text[:2000]
        run_id = re.search(r"/runs/([0-9a-f]{32})/", launched.headers["location"]).group(1)

        # ...and the worker reaches it: the crawl succeeds
        def finished():
            page = client.get(f"/runs/{run_id}/").text
            return re.search(r'badge status-(succeeded|failed|needs_attention)', page)

        ended = wait_until(finished, 120, message="the crawl to finish")
        assert ended.group(1) == "succeeded", output()[-3000:]

        # SIGTERM with the run page's socket open (and a keep-alive HTTP connection)
        daphne = [p for p in psutil.Process(proc.pid).children(recursive=True)
                  if "daphne" in " ".join(p.cmdline())]
        assert daphne, "no Daphne under bin/serve"
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        codes = close_codes(port, cookie, {f"/ws/runs/{run_id}/": {"type": "hello", "after": 0}},
                            lambda: proc.send_signal(signal.SIGTERM))
        assert codes == [CLOSE_SERVICE_RESTART]
        try:
            wait_until(lambda: all(map(exited, daphne)), WEB_STOPS_WITHIN_SECONDS)
        except AssertionError:
            raise AssertionError(f"Daphne still running after SIGTERM:\n{output()[-3000:]}") from None
        try:
            proc.wait(ALL_STOP_WITHIN_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"bin/serve still running:\n{output()[-3000:]}") from None
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
