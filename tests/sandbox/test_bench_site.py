"""The benchmarks' stand-in site (bench/site_server.py) answers as the app's own views do:
a crawl measured against it crawls the same site."""

import subprocess
import sys

import httpx
import pytest

from sandbox import site
from tests.support.processes import ROOT, process_env

pytestmark = pytest.mark.django_db(transaction=True)
QUERY = "pages=60&latency_ms=0&error_rate=0.0"


@pytest.fixture
def stand_in(transactional_db):
    proc = subprocess.Popen([sys.executable, "-m", "bench.site_server"], cwd=ROOT,
                            env=process_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()  # its way to stop
        proc.wait(30)


def test_the_stand_in_serves_the_views_bytes(stand_in, live_server):
    broken = next(n for n in range(60) if site.is_broken(n))
    paths = [f"/sandbox/site/page/{n}?{QUERY}" for n in (0, 1, 7, broken, 60)]
    paths += [f"/sandbox/site/generation?{QUERY}&since=0",
              "/sandbox/site/page/3?pages=banana", "/sandbox/site/page/3?latency_ms=-1"]
    with httpx.Client(timeout=30) as ours, httpx.Client(timeout=30) as app:
        for path in paths:
            got, want = ours.get(stand_in + path), app.get(live_server.url + path)
            assert (got.status_code, got.content) == (want.status_code, want.content), path
    assert want.status_code == 400  # the last: a bad parameter is refused by both


def test_the_stand_in_keeps_a_connection_across_requests(stand_in):
    with httpx.Client(timeout=30) as client:
        first = client.get(f"{stand_in}/sandbox/site/page/0?{QUERY}")
        second = client.get(f"{stand_in}/sandbox/site/page/1?{QUERY}")
        assert first.status_code == second.status_code == 200
        assert first.extensions["network_stream"] is second.extensions["network_stream"]


def test_the_stand_in_answers_only_gets(stand_in):
    response = httpx.post(f"{stand_in}/sandbox/site/page/0?{QUERY}", content=b"x", timeout=30)
    assert response.status_code == 405
