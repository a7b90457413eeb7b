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


def test_the_stand_in_serves_the_views_bytes_on_one_connection_and_only_gets(stand_in,
                                                                            live_server):
    # One test, one stand-in: every test here needs a database flushed around it
    # (the live server's), some 20 s on a loaded CI machine.
    broken = next(n for n in range(60) if site.is_broken(n))
    paths = [f"/sandbox/site/page/{n}?{QUERY}" for n in (0, 1, 7, broken, 60)]
    paths += [f"/sandbox/site/generation?{QUERY}&since=0",
              "/sandbox/site/page/3?pages=banana", "/sandbox/site/page/3?latency_ms=-1"]
    with httpx.Client(timeout=30) as ours, httpx.Client(timeout=30) as app:
        streams = []
        for path in paths:
            got, want = ours.get(stand_in + path), app.get(live_server.url + path)
            assert (got.status_code, got.content) == (want.status_code, want.content), path
            streams.append(got.extensions["network_stream"])
    assert want.status_code == 400  # the last: a bad parameter is refused by both
    assert all(stream is streams[0] for stream in streams)  # kept alive: one connection

    response = httpx.post(f"{stand_in}/sandbox/site/page/0?{QUERY}", content=b"x", timeout=30)
    assert response.status_code == 405
