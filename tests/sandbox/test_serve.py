"""``manage.py sandbox serve``: the sandbox runnable on its own port, under Daphne."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_runs_the_app_under_daphne(tmp_path):
    port = free_port()
    # These endpoints need no database; a throwaway SQLite path keeps it that way.
    env = {**os.environ, "SQLITE_PATH": str(tmp_path / "db.sqlite3")}
    env.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        [sys.executable, "manage.py", "sandbox", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}/sandbox"
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"{base}/llm/v1/models", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read().decode()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        assert response.status_code == 200
        assert response.headers["server"] == "daphne"
        rows = httpx.get(f"{base}/dataset/rows", params={"limit": 2}, timeout=5).json()
        assert [r["id"] for r in rows["rows"]] == [1, 2]
    finally:
        server.terminate()
        server.wait(timeout=10)
